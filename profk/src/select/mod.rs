//! Top-k selection on candle tensors: shape and mode handling, validation, and the dispatch to the
//! device paths.
//!
//! Every selector ranks by the same strict order — larger value first, ties by lower index, NaN
//! above +inf when allowed — so the answer is unique and never depends on the sample, the thread
//! count or the selector.

mod baselines;
pub(crate) mod cpu;
pub mod histogram;
pub(crate) mod key;

use crate::params::{self, Method};
use crate::{tuning::Tuning, Error, Mode, Result, TopKOptions};
use candle_core::{DType, Device, Tensor};
use std::time::Duration;

pub use cpu::MAX_ATTEMPTS;

/// Rows shorter than this go straight to exact selection: a sample would cost more than it saves.
pub const PROFK_MIN_N: usize = 1 << 13;

/// Bits of a row-local index in a composite: enough for the indices 0..n.
pub(crate) fn index_bits(n: u64) -> u32 {
    64 - n.saturating_sub(1).leading_zeros()
}

/// Per-call record of what the selector did. Row-wise calls sum the counts and stage times over
/// rows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SelectStats {
    /// Most attempts any row needed (0 when every row went to exact selection).
    pub attempts: u32,
    /// Some row fell back to exact full selection after `MAX_ATTEMPTS` failed attempts.
    pub fell_back: bool,
    /// R, the number of elements at or above the threshold on the final attempt, summed over rows.
    pub retained: u64,
    /// M, the buffer capacity of one row (0 without sampling).
    pub capacity: u64,
    /// S, the sample size of one row (0 without sampling).
    pub sample: u64,
    /// t, the rank of the threshold among the sampled values (0 without sampling).
    pub threshold_rank: u64,
    /// Selections performed (rows, or 1 in flat mode).
    pub rows: u64,
    /// Rows selected exactly without sampling (short rows, large k, or a baseline selector).
    pub exact_rows: u64,
    /// Attempts over all rows; each is an independent trial with the failure probabilities of the
    /// plan.
    pub total_attempts: u64,
    /// Attempts with R < k.
    pub recall_failures: u64,
    /// Attempts with R > M.
    pub overflows: u64,
    /// Rows that fell back.
    pub fallbacks: u64,
    /// Rows the CUDA histogram selection read once: the guess its block carried from the row before
    /// (or drew from a sample of the row) held.
    pub read_once: u64,
    /// Reads of the rows by the CUDA histogram selection's one-block kernel, summed over rows: one
    /// where the guess held, two where a second read completed it, three or four past that (a dense
    /// selection counts as one).
    pub row_reads: u64,
    /// Most reads of one row by that kernel.
    pub row_reads_most: u32,
    pub time_sample: Duration,
    pub time_filter: Duration,
    pub time_select: Duration,
    /// Wall-clock time of the whole call.
    pub time_total: Duration,
}

/// What one row contributes to [`SelectStats`].
#[derive(Clone, Debug, Default)]
pub(crate) struct RowStats {
    pub attempts: u32,
    pub fell_back: bool,
    pub exact: bool,
    pub retained: u64,
    pub recall_failures: u64,
    pub overflows: u64,
    pub time_sample: Duration,
    pub time_filter: Duration,
    pub time_select: Duration,
}

impl SelectStats {
    pub(crate) fn absorb(&mut self, row: &RowStats) {
        self.attempts = self.attempts.max(row.attempts);
        self.fell_back |= row.fell_back;
        self.retained += row.retained;
        self.exact_rows += u64::from(row.exact);
        self.total_attempts += u64::from(row.attempts);
        self.recall_failures += row.recall_failures;
        self.overflows += row.overflows;
        self.fallbacks += u64::from(row.fell_back);
        self.time_sample += row.time_sample;
        self.time_filter += row.time_filter;
        self.time_select += row.time_select;
    }
}

/// Values (input dtype) and i64 indices of the k selected elements of every selection.
#[derive(Clone, Debug)]
pub struct TopK {
    pub values: Tensor,
    pub indices: Tensor,
    pub stats: SelectStats,
}

/// Sample size S, threshold rank t and buffer capacity M of one row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub sample: u64,
    pub t: u64,
    pub capacity: u64,
}

impl From<params::Params> for Plan {
    fn from(p: params::Params) -> Self {
        Self {
            sample: p.sample,
            t: p.t,
            capacity: p.capacity,
        }
    }
}

/// Largest sample the CUDA path draws and selects in one launch per attempt (one block per row); a
/// larger one is drawn by a launch of its own and selected by a cooperative one.
pub const GPU_FUSED_SAMPLE: u64 = 16384;
/// Threads of a block of the CUDA path's spread sample (`sample_spread_*`, rows too few to fill the
/// device: each row's sample drawn by many blocks, each keeping its slice's t largest).
pub const GPU_SPREAD_THREADS: u64 = 256;
/// Most candidates the spread sample's last block of a row selects among (256 threads × 8,
/// kernels/sample.cuh `SPREAD_SLOTS`).
pub const GPU_SPREAD_CANDIDATES: u64 = 2048;
/// Samples a thread of the spread sample's kernels (`sample_spread_p{1,2,4}_*`).
pub const GPU_SPREAD_PER: [u64; 3] = [1, 2, 4];

/// How the spread sample divides a sample of `s` with threshold rank `t`: (blocks per row, samples
/// per thread), the fewest samples a thread (most blocks) whose slices' t largest fit the last
/// block; `None` where none does.
pub fn gpu_spread_shape(s: u64, t: u64) -> Option<(u64, u64)> {
    GPU_SPREAD_PER
        .iter()
        .find_map(|&per| gpu_spread_shape_per(s, t, per))
}

/// The spread sample's (blocks per row, samples per thread) at `per` samples a thread, where that
/// is one of its kernels and the slices' t largest fit the last block.
pub fn gpu_spread_shape_per(s: u64, t: u64, per: u64) -> Option<(u64, u64)> {
    let bpr = s.div_ceil(GPU_SPREAD_THREADS * per.max(1));
    (t > 0 && t <= s && GPU_SPREAD_PER.contains(&per) && bpr * t <= GPU_SPREAD_CANDIDATES)
        .then_some((bpr, per))
}

/// Sample sizes a single-row GPU call also weighs against the default: a larger sample keeps fewer
/// candidates, which matters when k (and so the buffer) is large.
const GPU_LARGER_SAMPLES: [u64; 2] = [1 << 16, 1 << 18];
/// Sample sizes a call of several rows also weighs: each sampled element is a random 32-byte read,
/// so the CPU rule's n/32 costs more than the larger buffer a smaller sample needs (H200,
/// 2026-12-02, an A/B of sample sizes in one call: 128x2^20 f32 k = 1024 0.335 ms with S = 16384,
/// 0.295 with 4096; 1024x2^18 k = 1024 0.912 with S = 8192, 0.832 with 2048; FlashInfer beside the
/// final rule in docs/perf.md at commit 0107786).
const GPU_ROW_SAMPLES: [u64; 3] = [1 << 11, 1 << 12, 1 << 13];

/// Cost of a plan on the GPU, in buffer elements (measured on the H200, 2026-11-30: a buffer
/// element costs about 0.07 ns in the exact top-k that follows the pass, a sampled element about
/// four times that; a buffer above [`GPU_FUSED_SAMPLE`] is not selected by one block per row, which
/// costs calls of several rows more). A sample above it, and one row's buffer, are selected by one
/// cooperative launch, no dearer than one block's (2026-12-02, one call, index order: 2^30 k = 8192
/// 1.099 ms with S = 2^14, 1.080 with 2^16, the rule's pick, and 1.069 with 2^18; flat 8192x2^17
/// 1.206 / 1.179 / 1.163; 2^28 0.355 / 0.350 / 0.369).
fn gpu_cost(p: &params::Params, rows: usize) -> u64 {
    let past_one_block = rows > 1 && p.capacity > GPU_FUSED_SAMPLE;
    p.capacity + 4 * p.sample + if past_one_block { 1_000_000 } else { 0 }
}

/// The plan Prof-K uses for rows of `n` with budget `eps` per row, or `None` when exact selection
/// is cheaper (short rows, k close to n). Exact parameters with the default sample size, memoized
/// per configuration.
pub fn plan_for(n: usize, k: usize, eps: f64) -> Result<Option<Plan>> {
    if k == 0 || n < PROFK_MIN_N {
        return Ok(None);
    }
    Ok(worth_sampling(n, params::cached(n as u64, k as u64, eps, Method::Exact)?).map(Plan::from))
}

/// [`plan_for`] on a GPU, for `rows` rows: the plan of [`gpu_params_for`].
pub fn gpu_plan_for(n: usize, k: usize, eps: f64, rows: usize) -> Result<Option<Plan>> {
    gpu_plan_tuned(n, k, eps, rows, &Tuning::active())
}

/// [`gpu_plan_for`] under `tuning`.
pub(crate) fn gpu_plan_tuned(
    n: usize,
    k: usize,
    eps: f64,
    rows: usize,
    tuning: &Tuning,
) -> Result<Option<Plan>> {
    Ok(gpu_params_tuned(n, k, eps, rows, tuning)?.map(Plan::from))
}

/// Longest list (buffer capacity, or k) of one row whose sorted outputs every block of the output
/// launch reads whole (`rank_whole`): a plain launch that also ranks a row that failed every
/// attempt, from its input, so that no fallback launch is queued.
pub const GPU_WHOLE_LIST_MAX: u64 = 1 << 16;

/// Whether the CUDA path reads the whole list of each row of a call of `rows` rows of k outputs
/// from buffers of `cap` (see [`GPU_WHOLE_LIST_MAX`]): one row whose list is at most that long.
pub fn gpu_whole_list(rows: u64, k: u64, cap: u64) -> bool {
    rows == 1 && cap.max(k) <= GPU_WHOLE_LIST_MAX
}
/// The share of the budget that plans one row whose list is read whole. Its failed row is ranked
/// inside the output launch by a few reads of the input row in every block, milliseconds, where
/// the fallback launch queued in every other call costs a few µs. A hundredth of the budget keeps
/// the expected cost far below that (2^24 f32 at k = 8192: Pr(failure) 8.6e-6 against 7.5e-4, for
/// t = 24 instead of 20 and about a fifth more kept elements).
pub const GPU_WHOLE_LIST_EPS_SHARE: f64 = 0.01;

/// The parameters, with their exact failure probabilities, of the plan the CUDA path takes for
/// `rows` rows of `n` with budget `eps` per row: among the default sample size,
/// [`GPU_FUSED_SAMPLE`] and a few larger sizes for a single row or smaller ones for several (at
/// most n/64), the exact parameters of least [`gpu_cost`]; `None` when exact selection is cheaper.
/// One row whose list is read whole is planned with [`GPU_WHOLE_LIST_EPS_SHARE`] of the budget.
pub fn gpu_params_for(n: usize, k: usize, eps: f64, rows: usize) -> Result<Option<params::Params>> {
    gpu_params_tuned(n, k, eps, rows, &Tuning::active())
}

/// [`gpu_params_for`] under `tuning`.
fn gpu_params_tuned(
    n: usize,
    k: usize,
    eps: f64,
    rows: usize,
    tuning: &Tuning,
) -> Result<Option<params::Params>> {
    let plan = gpu_params_within(n, k, eps, rows, tuning)?;
    match plan {
        Some(p) if gpu_whole_list(rows as u64, k as u64, p.capacity) => {
            gpu_params_within(n, k, eps * whole_list_eps_share(tuning), rows, tuning)
        }
        _ => Ok(plan),
    }
}

/// [`GPU_WHOLE_LIST_EPS_SHARE`], or the inverse of the divisor a benchmark sets (1: the whole
/// budget), to time what the stricter plan costs.
fn whole_list_eps_share(tuning: &Tuning) -> f64 {
    match tuning.whole_list_eps_div {
        Some(div) => 1.0 / div.max(1) as f64,
        None => GPU_WHOLE_LIST_EPS_SHARE,
    }
}

/// [`gpu_params_for`] with the whole budget `eps`.
fn gpu_params_within(
    n: usize,
    k: usize,
    eps: f64,
    rows: usize,
    tuning: &Tuning,
) -> Result<Option<params::Params>> {
    if k == 0 || n < PROFK_MIN_N {
        return Ok(None);
    }
    let (nu, ku) = (n as u64, k as u64);
    let default = params::cached(nu, ku, eps, Method::Exact)?;
    // A benchmark may set the sample size, to time the cost rule's alternatives.
    let forced_sample = match rows > 1 {
        true => tuning.sample_rows,
        false => tuning.sample_one_row,
    };
    if let Some(s) = forced_sample {
        return Ok(worth_sampling(
            n,
            params::cached_with_sample(nu, ku, eps, Method::Exact, Some(s))?,
        ));
    }
    let mut best = default;
    let others: &[u64] = if rows == 1 {
        &GPU_LARGER_SAMPLES
    } else {
        &GPU_ROW_SAMPLES
    };
    for &s in std::iter::once(&GPU_FUSED_SAMPLE).chain(others) {
        if s == default.sample || s.saturating_mul(64) > nu {
            continue;
        }
        let Ok(p) = params::cached_with_sample(nu, ku, eps, Method::Exact, Some(s)) else {
            continue;
        };
        if !p.is_full_selection() && gpu_cost(&p, rows) < gpu_cost(&best, rows) {
            best = p;
        }
    }
    Ok(worth_sampling(n, best))
}

/// [`plan_for`] with the CPU's sample size: the plan of [`cpu_params_for`].
pub fn cpu_plan_for(n: usize, k: usize, eps: f64) -> Result<Option<Plan>> {
    Ok(cpu_params_for(n, k, eps)?.map(Plan::from))
}

/// The parameters, with their exact failure probabilities, of the plan the CPU path takes (see
/// `cpu::plan`); `None` when exact selection is cheaper.
pub fn cpu_params_for(n: usize, k: usize, eps: f64) -> Result<Option<params::Params>> {
    if k == 0 || n < PROFK_MIN_N {
        return Ok(None);
    }
    Ok(worth_sampling(
        n,
        cpu::plan::params(n as u64, k as u64, eps)?,
    ))
}

fn worth_sampling(n: usize, p: params::Params) -> Option<params::Params> {
    // A sample plus a buffer over half the row would do the work of a full selection twice.
    if p.is_full_selection() || p.sample.saturating_add(p.capacity) >= n as u64 / 2 {
        return None;
    }
    Some(p)
}

/// How the elements are grouped: `rows` selections of `n` elements each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Selection {
    pub rows: usize,
    pub n: usize,
    pub k: usize,
    pub out_shape: Vec<usize>,
}

impl Selection {
    pub(crate) fn new(dims: &[usize], k: usize, mode: Mode) -> Result<Self> {
        let (rows, n, out_shape) = match mode {
            Mode::Flat => (1, dims.iter().product(), vec![k]),
            Mode::Rowwise => {
                let Some((&n, batch)) = dims.split_last() else {
                    return Err(Error::Shape {
                        shape: dims.to_vec(),
                        reason: "row-wise top-k needs at least one dimension; use flat mode for a scalar".into(),
                    });
                };
                let mut out = batch.to_vec();
                out.push(k);
                (batch.iter().product(), n, out)
            }
        };
        if k > n {
            return Err(Error::KTooLarge { k, n });
        }
        Ok(Self {
            rows,
            n,
            k,
            out_shape,
        })
    }
}

/// The exact top `k` of `x`: row-wise over the last dimension (a 1-D input is one row) or over all
/// elements (flat mode, flat indices). Values keep the input dtype (f32, bf16, f16, f64); indices
/// are i64, in `[0, n)` and distinct.
pub fn topk(x: &Tensor, k: usize, opts: &TopKOptions) -> Result<TopK> {
    let sel = validate(x, k, opts)?;
    let eps = opts.row_budget(sel.rows);
    let plan = match x.device() {
        Device::Cpu => cpu_plan_for(sel.n, k, eps)?,
        _ => gpu_plan_for(sel.n, k, eps, sel.rows)?,
    };
    dispatch(x, &sel, opts, plan, false)
}

/// [`topk`] with explicit Prof-K parameters, for benchmarks and tests. Any plan gives the exact
/// answer; a poor one costs redraws or the fallback. `plan.sample` must lie in `[1, n]`.
pub fn topk_with_plan(x: &Tensor, k: usize, opts: &TopKOptions, plan: Plan) -> Result<TopK> {
    let sel = validate(x, k, opts)?;
    if plan.sample == 0 || plan.sample > sel.n as u64 || plan.t == 0 || plan.t > plan.sample {
        return Err(Error::Param(format!(
            "plan {plan:?} needs 1 <= t <= sample <= n = {}",
            sel.n
        )));
    }
    dispatch(x, &sel, opts, (k > 0).then_some(plan), true)
}

/// [`topk`] with the plan already chosen (`None`: exact selection without sampling).
pub(crate) fn topk_on_plan(
    x: &Tensor,
    k: usize,
    opts: &TopKOptions,
    plan: Option<Plan>,
) -> Result<TopK> {
    let sel = validate(x, k, opts)?;
    dispatch(x, &sel, opts, plan, false)
}

fn validate(x: &Tensor, k: usize, opts: &TopKOptions) -> Result<Selection> {
    if !matches!(
        x.dtype(),
        DType::F32 | DType::F64 | DType::BF16 | DType::F16
    ) {
        return Err(Error::DType(x.dtype()));
    }
    if !(opts.eps > 0.0 && opts.eps < 1.0) {
        return Err(Error::Param(format!(
            "eps = {} must lie strictly between 0 and 1",
            opts.eps
        )));
    }
    Selection::new(x.dims(), k, opts.mode)
}

/// `forced`: the plan is the caller's, so the CUDA path runs it even where its row kernel would
/// serve.
#[cfg_attr(not(feature = "cuda"), allow(unused_variables))]
fn dispatch(
    x: &Tensor,
    sel: &Selection,
    opts: &TopKOptions,
    plan: Option<Plan>,
    forced: bool,
) -> Result<TopK> {
    match x.device() {
        Device::Cpu => cpu::topk(x, sel, opts, plan),
        // f64 has no CUDA kernels: it takes the CPU route below.
        #[cfg(feature = "cuda")]
        Device::Cuda(_) if x.dtype() != DType::F64 => crate::cuda::topk(x, sel, opts, plan, forced),
        // Devices without a path of their own select on the CPU and get the results back.
        device => {
            let out = cpu::topk(&x.to_device(&Device::Cpu)?, sel, opts, plan)?;
            Ok(TopK {
                values: out.values.to_device(device)?,
                indices: out.indices.to_device(device)?,
                stats: out.stats,
            })
        }
    }
}

/// Row-wise top-k of `scores [.., n]`, then the matching rows of `values [.., n, m]`:
/// returns `([.., k, m], indices [.., k])`. The gather can never read out of range: the indices are
/// checked against n before it runs.
pub fn topk_gather(
    scores: &Tensor,
    values: &Tensor,
    k: usize,
    opts: &TopKOptions,
) -> Result<(Tensor, Tensor)> {
    let (sd, vd) = (scores.dims(), values.dims());
    if sd.is_empty() || vd.len() != sd.len() + 1 || vd[..sd.len()] != *sd {
        return Err(Error::Shape {
            shape: vd.to_vec(),
            reason: format!(
                "values must have the scores' shape {sd:?} plus one trailing dimension [.., n, m]"
            ),
        });
    }
    if !scores.device().same_device(values.device()) {
        return Err(Error::Param(
            "scores and values live on different devices".into(),
        ));
    }
    let sel = topk(
        scores,
        k,
        &TopKOptions {
            mode: Mode::Rowwise,
            ..opts.clone()
        },
    )?;
    let n = sd[sd.len() - 1];
    let m = vd[vd.len() - 1];
    let mut out_shape = sel.indices.dims().to_vec();
    out_shape.push(m);
    if sel.indices.elem_count() == 0 {
        return Ok((
            Tensor::zeros(out_shape, values.dtype(), values.device())?,
            sel.indices,
        ));
    }
    let (lo, hi) = (
        sel.indices.min_all()?.to_scalar::<i64>()?,
        sel.indices.max_all()?.to_scalar::<i64>()?,
    );
    if lo < 0 || hi >= n as i64 {
        return Err(Error::Param(format!(
            "selector returned an index outside [0, {n}): [{lo}, {hi}]"
        )));
    }
    let rank = sel.indices.rank();
    let idx = sel
        .indices
        .unsqueeze(rank)?
        .broadcast_as(out_shape)?
        .contiguous()?;
    let gathered = values.gather(&idx, rank - 1)?;
    Ok((gathered, sel.indices))
}

#[cfg(test)]
mod tests {
    #[test]
    fn gpu_spread_shape_fits_the_last_block() {
        for (s, t) in [(16384, 5), (16384, 20), (65536, 5), (65536, 32), (7, 7)] {
            let (bpr, per) = gpu_spread_shape(s, t).expect("a shape");
            assert!(bpr * t <= GPU_SPREAD_CANDIDATES, "s {s} t {t}");
            assert!(bpr * per * GPU_SPREAD_THREADS >= s, "s {s} t {t}");
            assert!(
                (bpr - 1) * per * GPU_SPREAD_THREADS < s,
                "s {s} t {t}: a block with nothing"
            );
            assert!(GPU_SPREAD_PER.contains(&per));
        }
        assert_eq!(gpu_spread_shape(65536, 5), Some((256, 1)));
        assert_eq!(gpu_spread_shape(65536, 32), Some((64, 4)));
        assert_eq!(gpu_spread_shape(16384, 20), Some((64, 1)));
        assert_eq!(gpu_spread_shape(10, 0), None);
        assert_eq!(gpu_spread_shape(10, 11), None);
        assert_eq!(gpu_spread_shape(1 << 24, 4096), None);
        assert_eq!(gpu_spread_shape(1 << 22, 8), None);
        assert_eq!(gpu_spread_shape_per(65536, 5, 4), Some((64, 4)));
        assert_eq!(gpu_spread_shape_per(65536, 32, 1), None);
        assert_eq!(gpu_spread_shape_per(65536, 5, 3), None);
    }

    use super::*;

    #[test]
    fn gpu_plan_weighs_the_sample_against_the_buffer() {
        let eps = 1e-3;
        // 2^24, k = 8192: the fused sample costs a slightly larger buffer than the default
        // (25 662), and less in all.
        let default = plan_for(1 << 24, 8192, eps).unwrap().unwrap();
        let gpu = gpu_plan_for(1 << 24, 8192, eps, 1).unwrap().unwrap();
        assert!(default.sample > GPU_FUSED_SAMPLE);
        assert_eq!(gpu.sample, GPU_FUSED_SAMPLE);
        // Its list is read whole, so a hundredth of the budget plans it: a larger threshold rank.
        let within = gpu_params_within(1 << 24, 8192, eps, 1, &Tuning::default())
            .unwrap()
            .unwrap();
        let strict = gpu_params_for(1 << 24, 8192, eps, 1).unwrap().unwrap();
        assert!(within.capacity <= GPU_WHOLE_LIST_MAX && strict.capacity <= GPU_WHOLE_LIST_MAX);
        assert!(
            strict.t > within.t
                && strict.p_recall_fail + strict.p_overflow <= eps * GPU_WHOLE_LIST_EPS_SHARE
        );
        // A large single-row k: a larger sample keeps far fewer candidates.
        let n = 1_557_611_200;
        let gpu = gpu_plan_for(n, n / 1000, eps, 1).unwrap().unwrap();
        let default = plan_for(n, n / 1000, eps).unwrap().unwrap();
        assert!(gpu.sample > default.sample && gpu.capacity < default.capacity);
        // 2^30, k = 8192: 2^16 samples keep the buffer (and the call's aux memory) a third of the
        // fused sample's.
        let gpu = gpu_plan_for(1 << 30, 8192, eps, 1).unwrap().unwrap();
        assert_eq!(gpu.sample, 1 << 16, "{gpu:?}");
        // Many rows draw less than the default sample per row, as little as leaves a buffer that
        // one block per row selects (the sizes that ran fastest on the H200).
        for (n, k, rows, sample) in [
            (1usize << 18, 1024usize, 1024usize, 1u64 << 11),
            (1 << 20, 1024, 128, 1 << 12),
            (1 << 20, 64, 128, 1 << 11),
        ] {
            let e = eps / rows as f64;
            let gpu = gpu_plan_for(n, k, e, rows).unwrap().unwrap();
            let default = plan_for(n, k, e).unwrap().unwrap();
            assert!(gpu.sample < default.sample, "{n} {k}: {gpu:?}");
            assert_eq!(gpu.sample, sample, "{n} {k}: {gpu:?}");
            assert!(gpu.capacity <= GPU_FUSED_SAMPLE, "{n} {k}: {gpu:?}");
        }
        assert_eq!(gpu_plan_for(1 << 20, 0, eps, 1).unwrap(), None);
    }
}
