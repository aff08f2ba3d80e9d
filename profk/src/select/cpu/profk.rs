//! One row through Prof-K: sample, threshold, filter, exact top-k of the buffer, check, redraw.

use super::rank::top_of;
use super::{exact, filter, sample, NanFound, RowJob, RowOut};
use crate::select::key::Element;
use crate::select::Plan;
use std::time::Instant;

/// Attempts before the exact full selection takes over (each fails with probability ≤ ε).
pub const MAX_ATTEMPTS: u32 = 6;

/// The exact top `job.k` of `row`, whatever the samples drawn.
pub fn select<T: Element, const MAG: bool>(
    row: &[T],
    row_id: u64,
    job: &RowJob,
    plan: Plan,
) -> Result<RowOut, NanFound> {
    let k = job.k as u64;
    let mut out = RowOut::default();
    for attempt in 0..MAX_ATTEMPTS {
        out.stats.attempts = attempt + 1;
        let started = Instant::now();
        let (pass, sampled_at) =
            sample_and_filter::<T, MAG>(row, row_id, job.seed, attempt, plan, job.nan_error)?;
        let filtered_at = Instant::now();
        out.stats.time_sample += sampled_at - started;
        out.stats.time_filter += filtered_at - sampled_at;
        if job.nan_error && pass.nans > 0 {
            return Err(NanFound);
        }
        out.stats.retained = pass.retained;
        if pass.retained < k {
            out.stats.recall_failures += 1;
            continue;
        }
        if pass.retained > plan.capacity {
            out.stats.overflows += 1;
            // Approximate mode keeps a full buffer: its top k is exact with probability ≥ 1 − ε.
            if !job.approximate || (pass.candidates.len() as u64) < k {
                continue;
            }
        }
        let mut candidates = pass.candidates;
        out.indices = top_of(&mut candidates, job.k, job.order);
        out.stats.time_select += filtered_at.elapsed();
        return Ok(out);
    }
    out.stats.fell_back = true;
    let started = Instant::now();
    out.indices = exact::<T, MAG>(row, job.k, job.order);
    out.stats.time_select += started.elapsed();
    Ok(out)
}

/// R of the first attempt on `row`: how many of its elements rank at or above the threshold of the
/// attempt's sample (NaN ranks above +inf).
pub fn first_attempt_retained<T: Element, const MAG: bool>(
    row: &[T],
    row_id: u64,
    seed: u64,
    plan: Plan,
) -> Result<u64, NanFound> {
    Ok(
        sample_and_filter::<T, MAG>(row, row_id, seed, 0, plan, false)?
            .0
            .retained,
    )
}

/// Stages 1 to 3 of one attempt: its sample, the threshold, the filter pass; and when the threshold
/// was known.
fn sample_and_filter<T: Element, const MAG: bool>(
    row: &[T],
    row_id: u64,
    seed: u64,
    attempt: u32,
    plan: Plan,
    nan_error: bool,
) -> Result<(filter::Pass<T::Key>, Instant), NanFound> {
    let mut rng = sample::stream(seed, row_id, attempt);
    let sampled = sample::draw(&mut rng, row.len() as u64, plan.sample);
    let thr =
        sample::threshold::<T, MAG>(row, &sampled, plan.t, nan_error).map_err(|_| NanFound)?;
    let sampled_at = Instant::now();
    Ok((
        filter::filter::<T, MAG>(row, thr, plan.capacity),
        sampled_at,
    ))
}
