//! Prof-K: exact top-k selection.
//!
//! A uniform sample without replacement gives a conservative threshold, one pass over the input
//! keeps the elements above it in a buffer of capacity M, an exact top-k of the buffer gives the
//! answer, and the count check k ≤ R ≤ M detects the rare miss and redraws. The result is always
//! exact; only the cost is random.

pub mod accumulate;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod epsilon;
pub mod error;
mod kernel_defines;
pub mod options;
pub mod params;
pub mod select;
pub mod sharded;
pub mod tuning;
mod work_split;

pub use accumulate::{accumulate, topk_accumulate, Accumulation, FlatSpans};
pub use error::{Error, Result};
pub use options::{Mode, NanPolicy, Order, Selector, TopKOptions};
pub use select::histogram::{gpu_histogram_path, HistogramPath};
pub use select::{
    cpu_params_for, cpu_plan_for, gpu_params_for, gpu_plan_for, plan_for, topk, topk_gather,
    topk_with_plan, Plan, SelectStats, TopK, MAX_ATTEMPTS,
};
pub use tuning::Tuning;
