//! Which algorithm a CUDA call runs, decided in one place from the selector, the shape and the
//! plan.

use super::Shape;
use crate::select::histogram::histogram_layout;
use crate::tuning::{ForcedRoute, Tuning};
use crate::{gpu_histogram_path, HistogramPath, Plan, Selector};

/// The algorithm of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Prof-K's shapes that a histogram of the top key bits selects faster than a sample would
    /// (`rows.rs`, kernels/rows.cu): rows short enough for one block each, or few rows split over
    /// the SMs while the input stays small (the measurements are on
    /// [`crate::select::histogram`]'s constants). It has no failure probability and no redraw.
    Histogram(HistogramPath),
    /// Prof-K's own algorithm (`sampled.rs`): sample, threshold, filter, count check, redraw, exact
    /// cut of the buffer, with `plan`'s sample size, threshold rank and buffer capacity.
    Sampled(Plan),
    /// The `sort` baseline: CUB's sort of every row, then the first k (`baselines.rs`).
    Sort,
    /// An exact radix selection over the whole input: the `select` and `radix` selectors, and
    /// Prof-K where no plan pays (rows too short to sample, k close to n).
    Dense,
}

/// The route of a call of `selector` on `shape` selecting `k` with `plan` (Prof-K's plan, if
/// sampling pays) on a device of `sms` SMs. `histogram_allowed` is false where the caller chose the
/// plan itself or the call fuses an accumulation into its first sample: both need the sampled path.
pub fn route(
    selector: Selector,
    shape: &Shape,
    k: u64,
    plan: Option<Plan>,
    histogram_allowed: bool,
    sms: u32,
    tuning: &Tuning,
) -> Route {
    match selector {
        Selector::Sort => Route::Sort,
        Selector::Select | Selector::Radix => Route::Dense,
        Selector::Profk => {
            let histogram = histogram_allowed && tuning.route != ForcedRoute::Sampled;
            match (
                histogram
                    .then(|| histogram_path(shape, k, sms, tuning))
                    .flatten(),
                plan,
            ) {
                (Some(path), _) => Route::Histogram(path),
                (None, Some(plan)) => Route::Sampled(plan),
                (None, None) => Route::Dense,
            }
        }
    }
}

/// The histogram layout of a shape the histogram selection serves ([`gpu_histogram_path`]); under
/// a benchmark's [`ForcedRoute::Histogram`], of any shape whose composites fit 64 bits.
fn histogram_path(shape: &Shape, k: u64, sms: u32, tuning: &Tuning) -> Option<HistogramPath> {
    let narrow = shape.key_bits + shape.index_bits <= 64;
    if tuning.route == ForcedRoute::Histogram && k > 0 && narrow {
        return Some(histogram_layout(shape.rows, shape.n, sms));
    }
    let elem_bytes = u64::from(shape.key_bits / 8);
    gpu_histogram_path(shape.rows, shape.n, k, elem_bytes, sms)
}
