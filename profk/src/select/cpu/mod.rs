//! The CPU path: reads the tensor's storage in place, runs every row (in parallel when there are many)
//! and assembles values and indices.

pub(crate) mod filter;
pub(crate) mod plan;
mod profk;
mod radix;
pub(crate) mod rank;
pub(crate) mod sample;

use super::baselines::{self, Baseline};
use super::key::Element;
use super::{Plan, RowStats, SelectStats, Selection, TopK};
use crate::{Error, NanPolicy, Order, Result, Selector, TopKOptions};
use candle_core::{CpuStorage, DType, Device, Storage, Tensor};
use half::{bf16, f16};
use rayon::prelude::*;
use std::ops::Range;
use std::time::Instant;

pub use profk::MAX_ATTEMPTS;

/// Rows up to this length go straight to the pair-based exact selection; longer ones to radix select.
const PAIRS_MAX_N: usize = 1 << 16;

/// What every row of one call shares.
pub(crate) struct RowJob {
    pub k: usize,
    pub order: Order,
    pub nan_error: bool,
    pub approximate: bool,
    pub seed: u64,
    pub selector: Selector,
    /// Prof-K parameters; `None` sends the row to exact selection (short rows, large k).
    pub plan: Option<Plan>,
}

/// A row holds a NaN and the policy rejects it; the caller reports the whole tensor's NaNs.
#[derive(Debug)]
pub(crate) struct NanFound;

#[derive(Default)]
pub(crate) struct RowOut {
    pub indices: Vec<u64>,
    pub stats: RowStats,
}

/// Top-k of a CPU tensor. `x` may be strided; a non-contiguous view is made contiguous first.
pub(crate) fn topk(
    x: &Tensor,
    sel: &Selection,
    opts: &TopKOptions,
    plan: Option<Plan>,
) -> Result<TopK> {
    let started = Instant::now();
    let x = if x.is_contiguous() {
        x.clone()
    } else {
        x.contiguous()?
    };
    let job = RowJob {
        k: sel.k,
        order: opts.order,
        nan_error: opts.nan == NanPolicy::Error,
        approximate: opts.approximate,
        seed: opts.seed,
        selector: opts.selector,
        plan,
    };
    let (storage, layout) = x.storage_and_layout();
    let Storage::Cpu(cpu) = &*storage else {
        return Err(Error::Param(
            "the CPU selector received a tensor stored on another device".into(),
        ));
    };
    let (start, end) = layout
        .contiguous_offsets()
        .ok_or_else(|| Error::Param("contiguous tensor without contiguous offsets".into()))?;
    let mut out = match x.dtype() {
        DType::F32 => run::<f32>(cpu, start..end, sel, &job, opts.by_magnitude),
        DType::F64 => run::<f64>(cpu, start..end, sel, &job, opts.by_magnitude),
        DType::BF16 => run::<bf16>(cpu, start..end, sel, &job, opts.by_magnitude),
        DType::F16 => run::<f16>(cpu, start..end, sel, &job, opts.by_magnitude),
        other => Err(Error::DType(other)),
    }?;
    out.stats.time_total = started.elapsed();
    Ok(out)
}

/// The selection over the elements `range` of `cpu`, stored as `T`.
fn run<T: Element>(
    cpu: &CpuStorage,
    range: Range<usize>,
    sel: &Selection,
    job: &RowJob,
    by_magnitude: bool,
) -> Result<TopK> {
    let data = &cpu.as_slice::<T>()?[range];
    if by_magnitude {
        run_keyed::<T, true>(data, sel, job)
    } else {
        run_keyed::<T, false>(data, sel, job)
    }
}

fn run_keyed<T: Element, const MAG: bool>(
    data: &[T],
    sel: &Selection,
    job: &RowJob,
) -> Result<TopK> {
    let n = sel.n;
    let row = |r: usize| select_row::<T, MAG>(&data[r * n..(r + 1) * n], r as u64, job);
    // One long row parallelizes inside (chunks of the filter pass); many rows parallelize over rows.
    let rows: Vec<std::result::Result<RowOut, NanFound>> = if sel.rows == 1 {
        vec![row(0)]
    } else {
        (0..sel.rows).into_par_iter().map(row).collect()
    };
    let mut stats = SelectStats {
        rows: sel.rows as u64,
        sample: job.plan.map_or(0, |p| p.sample),
        threshold_rank: job.plan.map_or(0, |p| p.t),
        capacity: job.plan.map_or(0, |p| p.capacity),
        ..SelectStats::default()
    };
    let mut values = Vec::with_capacity(sel.rows * sel.k);
    let mut indices = Vec::with_capacity(sel.rows * sel.k);
    for (r, out) in rows.into_iter().enumerate() {
        let Ok(out) = out else {
            return Err(nan_report(data));
        };
        stats.absorb(&out.stats);
        let row = &data[r * n..(r + 1) * n];
        values.extend(out.indices.iter().map(|&i| row[i as usize]));
        indices.extend(out.indices.iter().map(|&i| i as i64));
    }
    let shape = sel.out_shape.as_slice();
    Ok(TopK {
        values: Tensor::from_vec(values, shape, &Device::Cpu)?,
        indices: Tensor::from_vec(indices, shape, &Device::Cpu)?,
        stats,
    })
}

fn select_row<T: Element, const MAG: bool>(
    row: &[T],
    row_id: u64,
    job: &RowJob,
) -> std::result::Result<RowOut, NanFound> {
    if let (Selector::Profk, Some(plan)) = (job.selector, job.plan) {
        if job.k > 0 {
            return profk::select::<T, MAG>(row, row_id, job, plan);
        }
    }
    if job.nan_error && row.par_iter().any(|x| x.is_nan_value()) {
        return Err(NanFound);
    }
    let started = Instant::now();
    let indices = match job.selector {
        Selector::Sort => baselines::run::<T, MAG>(row, job.k, job.order, Baseline::Sort),
        Selector::Select => baselines::run::<T, MAG>(row, job.k, job.order, Baseline::Select),
        Selector::Radix if job.k > 0 => {
            let mut chosen = radix::select::<T, MAG>(row, job.k as u64);
            rank::arrange(&mut chosen, job.order)
        }
        Selector::Radix | Selector::Profk => exact::<T, MAG>(row, job.k, job.order),
    };
    let stats = RowStats {
        exact: true,
        time_select: started.elapsed(),
        ..RowStats::default()
    };
    Ok(RowOut { indices, stats })
}

/// R of Prof-K's first attempt with `plan` on every row of `x` (a contiguous f32 CPU tensor whose
/// last dimension is the row), the sampling and count stage only; NaN ranks above +inf.
pub(crate) fn first_attempts(x: &Tensor, plan: Plan, seed: u64) -> Result<Vec<u64>> {
    let n = x.dims().last().copied().unwrap_or(1).max(1);
    if plan.sample == 0 || plan.sample > n as u64 || plan.t == 0 || plan.t > plan.sample {
        return Err(Error::Param(format!(
            "plan {plan:?} needs 1 <= t <= sample <= n = {n}"
        )));
    }
    let data: Vec<f32> = x.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
    data.par_chunks(n)
        .enumerate()
        .map(|(r, row)| {
            profk::first_attempt_retained::<f32, false>(row, r as u64, seed, plan)
                .map_err(|NanFound| nan_report(&data))
        })
        .collect()
}

/// Exact selection without sampling: pairs for short rows, radix histograms (memory O(k)) for long ones.
pub(crate) fn exact<T: Element, const MAG: bool>(row: &[T], k: usize, order: Order) -> Vec<u64> {
    if k == 0 {
        Vec::new()
    } else if row.len() <= PAIRS_MAX_N {
        baselines::run::<T, MAG>(row, k, order, Baseline::Select)
    } else {
        let mut chosen = radix::select::<T, MAG>(row, k as u64);
        rank::arrange(&mut chosen, order)
    }
}

/// The NaN error for the whole input: how many, and the first flat index.
fn nan_report<T: Element>(data: &[T]) -> Error {
    let (count, first) = data
        .par_iter()
        .enumerate()
        .filter(|(_, x)| x.is_nan_value())
        .map(|(i, _)| (1usize, i))
        .reduce(|| (0, usize::MAX), |a, b| (a.0 + b.0, a.1.min(b.1)));
    Error::NaN { count, first }
}
