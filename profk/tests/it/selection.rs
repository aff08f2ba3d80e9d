//! Selection against the full-sort reference on adversarial and random inputs, on every device.
use crate::common;

use runtime::test_device;

test_device!(common::{
    adversarial,
    masked_row_returns_its_own_columns,
    adversarial_long_rows,
    nan_policies,
    k_bounds,
    shapes_and_views,
    random_sweep,
    forced_redraws_and_fallback,
    fallen_back_rows,
    sorted_from_buffers,
    long_outputs,
    gather,
    many_rows,
    approximate_mode,
    concurrent_callers,
});
