//! The batch-global selection of B·k activations through profk, with timing and the optional cross-check
//! against a second selector.
use crate::config::SelectorConfig;
use crate::{Error, Result};
use candle_core::Tensor;
use std::time::{Duration, Instant};

/// Flat indices (i64, ascending) of the `keep` largest elements of `pre`, and the time it took.
pub struct Selected {
    pub indices: Tensor,
    pub time: Duration,
}

pub fn select_flat(
    pre: &Tensor,
    keep: usize,
    selector: profk::Selector,
    seed: u64,
) -> Result<Selected> {
    // The scores may still be in flight: wait, so that the time is the selection's own.
    sync(pre)?;
    let t0 = Instant::now();
    let indices = select_indices(pre, keep, profk::Mode::Flat, selector, seed)?;
    sync(&indices)?;
    Ok(Selected {
        indices,
        time: t0.elapsed(),
    })
}

/// Per-row selection of `keep` elements of `scores [B, n]`, returned as flat (row · n + col) indices.
pub fn select_rows(
    scores: &Tensor,
    keep: usize,
    selector: profk::Selector,
    seed: u64,
) -> Result<Tensor> {
    let (b, n) = scores.dims2()?;
    let cols = select_indices(scores, keep, profk::Mode::Rowwise, selector, seed)?;
    let offsets = Tensor::arange(0i64, b as i64, scores.device())?
        .broadcast_mul(&Tensor::new(n as i64, scores.device())?)?
        .unsqueeze(1)?;
    Ok(cols.broadcast_add(&offsets)?.flatten_all()?)
}

/// The `keep` selected elements of `t` (per row or over all of it, by `mode`) as i64 indices in
/// ascending order, the order the sparse products expect.
pub fn select_indices(
    t: &Tensor,
    keep: usize,
    mode: profk::Mode,
    selector: profk::Selector,
    seed: u64,
) -> Result<Tensor> {
    let opts = profk::TopKOptions {
        selector,
        mode,
        order: profk::Order::Index,
        seed,
        ..Default::default()
    };
    Ok(profk::topk(t, keep, &opts)?.indices.contiguous()?)
}

/// Runs the second selector of `cfg` (when it has one) on the same input and requires the identical
/// set of elements; returns the time its selection took, which the run records (`compare_select_ms`)
/// as its in-run speed-up check (`None` without a second selector).
pub fn cross_check(
    pre: &Tensor,
    keep: usize,
    chosen: &Tensor,
    cfg: &SelectorConfig,
    step: u64,
) -> Result<Option<Duration>> {
    let Some(with) = cfg.compare_with() else {
        return Ok(None);
    };
    let other = select_flat(pre, keep, with, step)?;
    let a: Vec<i64> = chosen.to_vec1()?;
    let b: Vec<i64> = other.indices.to_vec1()?;
    let differ = a.iter().zip(&b).filter(|(x, y)| x != y).count() + a.len().abs_diff(b.len());
    if differ > 0 {
        return Err(Error::SelectionMismatch {
            step,
            a: cfg.kind.name().into(),
            b: with.name().into(),
            differ,
            k: keep,
        });
    }
    Ok(Some(other.time))
}

/// Waits for the device so that timings measure the work, not its launch.
pub fn sync(t: &Tensor) -> Result<()> {
    t.device().synchronize()?;
    Ok(())
}
