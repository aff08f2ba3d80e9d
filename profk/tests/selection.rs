//! Selection against the full-sort reference on adversarial and random inputs, on every device.
mod common;

use runtime::test_device;

test_device!(adversarial, common::adversarial);
test_device!(
    masked_row_returns_its_own_columns,
    common::masked_row_returns_its_own_columns
);
test_device!(adversarial_long_rows, common::adversarial_long_rows);
test_device!(nan_policies, common::nan_policies);
test_device!(k_bounds, common::k_bounds);
test_device!(shapes_and_views, common::shapes_and_views);
test_device!(random_sweep, common::random_sweep);
test_device!(
    forced_redraws_and_fallback,
    common::forced_redraws_and_fallback
);
test_device!(gather, common::gather);
test_device!(many_rows, common::many_rows);
test_device!(approximate_mode, common::approximate_mode);
