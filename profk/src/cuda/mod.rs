//! The CUDA path of [`crate::topk`]: Prof-K and the `sort` and `radix` baselines on candle's CUDA
//! storage and stream.
//!
//! One call queues its whole pipeline on candle's stream with no host synchronization in between:
//! sample, threshold, filter with the k <= R <= M check evaluated on the device, one redraw for the
//! rows that failed (their kernels skip every row that passed; one row skips it where the fallback
//! costs less, see `work_split::device_attempts`), the exact top-k of each buffer, an exact radix
//! selection for the rows that failed every attempt, and a sort of the k per row (for few rows in the
//! values-descending order, the buffer's top-k and its sort are one launch, `rank_list`). [`topk_deferred`]
//! returns the outputs and a [`DeviceStatus`] without waiting; [`crate::topk`] reads the status once at
//! the end to report NaN errors and fill [`SelectStats`].
mod abi;
pub(crate) mod accumulate;
#[cfg(feature = "bench")]
pub mod bench;
mod filter;
mod launch;
mod module;
mod rank_list;
mod record;
mod rows;
mod sample;
mod select;
mod sort;

use candle_core::cuda::cudarc::driver::{CudaSlice, DevicePtr};
use candle_core::cuda::{CudaDType, CudaDevice, CudaStorage};
use candle_core::op::BackpropOp;
use candle_core::{DType, Device, Storage, Tensor};
use launch::Dev;
use std::time::Instant;

use crate::select::{Plan, SelectStats, Selection as RowsSpec, TopK};
use crate::{Error, NanPolicy, Order, Result, Selector, TopKOptions};
use abi::RowList;
use abi::{RowRun, GLOBAL_BYTES, ROW_FALLBACK, ROW_OK, ROW_PENDING, ROW_RUN_BYTES};
use launch::{Arena, Arg};
use module::Family;
use select::{SelState, Selection, Source};

pub use launch::Arena as CallArena;

/// Stages a timing variant leaves out (the results of such a call are not meaningful). Only the
/// `bench` feature can set them: without it `has` is a constant `false` and the production paths
/// carry no check.
pub mod skip {
    pub const REDRAW: u32 = 1;
    pub const BUFFER: u32 = 2;
    pub const FALLBACK: u32 = 4;
    pub const OUTPUT: u32 = 8;
    /// Not a skip: take the path of composites wider than 64 bits (rows over 2^32 f32 elements)
    /// even where 64 bits suffice, so that tests reach it with small inputs.
    pub const WIDE: u32 = 16;
    /// Not a skip: take the sampled path where the histogram selection would run, to time both.
    pub const ROWS: u32 = 32;
    /// Not a skip: take the histogram selection on any shape whose composites fit 64 bits, to time it
    /// where the default leaves it.
    pub const ROW_KERNEL: u32 = 64;
    /// Not a skip: select the sample's threshold of rows too few to fill the device as before the
    /// spread sample (one block a row, or a cooperative launch), to time both.
    pub const SPREAD: u32 = 128;
    #[cfg(feature = "bench")]
    thread_local!(static SKIP: std::cell::Cell<u32> = const { std::cell::Cell::new(0) });
    /// Runs `f` with the given stages left out of every call on this thread.
    #[cfg(feature = "bench")]
    pub fn with<R>(mask: u32, f: impl FnOnce() -> R) -> R {
        SKIP.with(|s| s.set(mask));
        let r = f();
        SKIP.with(|s| s.set(0));
        r
    }
    #[cfg(feature = "bench")]
    pub(crate) fn has(bit: u32) -> bool {
        SKIP.with(|s| s.get() & bit != 0)
    }
    #[cfg(not(feature = "bench"))]
    #[inline(always)]
    pub(crate) const fn has(_bit: u32) -> bool {
        false
    }
}

/// The input as the kernels see it.
pub struct Input {
    pub ptr: u64,
    pub suffix: &'static str,
    pub dtype: DType,
    pub mag: bool,
}

/// Rows, row length and the bit widths of the (key, index) composite.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub rows: u64,
    pub n: u64,
    /// Key bits: 32 for f32, 16 for f16 and bf16.
    pub kb: u32,
    /// Index bits: enough for n - 1.
    pub ib: u32,
}

/// Results queued on the stream and the device record that says how they were obtained.
pub struct Deferred {
    pub values: Tensor,
    pub indices: Tensor,
    pub status: DeviceStatus,
}

/// Per-row outcomes and the NaN count, still on the device; [`DeviceStatus::read`] synchronizes.
pub struct DeviceStatus {
    /// `RowRun` per row, then `Global`: owned by the call, so it outlives the shared workspace.
    record: record::Record,
    stream: std::sync::Arc<candle_core::cuda::cudarc::driver::CudaStream>,
    nan: NanPolicy,
    plan: Option<Plan>,
    rows: u64,
    /// Device memory the call allocated besides its outputs, in bytes.
    pub aux_bytes: usize,
    started: Instant,
}

impl DeviceStatus {
    /// Waits for the call, then reports NaN errors and the statistics.
    pub fn read(&self) -> Result<SelectStats> {
        let len = self.rows as usize * ROW_RUN_BYTES + GLOBAL_BYTES;
        let bytes = self
            .stream
            .clone_dtoh(&self.record.slice().slice(..len))
            .map_err(launch::drv)?;
        let (run_bytes, g) = bytes.split_at(self.rows as usize * ROW_RUN_BYTES);
        let word = |b: &[u8], i: usize| {
            u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
        };
        let (nan_count, nan_first_inv) = (word(g, 0), word(g, 1));
        if self.nan == NanPolicy::Error && nan_count > 0 {
            return Err(Error::NaN {
                count: nan_count as usize,
                first: (!nan_first_inv) as usize,
            });
        }
        let mut stats = SelectStats {
            rows: self.rows,
            ..Default::default()
        };
        if let Some(p) = self.plan {
            stats.sample = p.sample;
            stats.threshold_rank = p.t;
            stats.capacity = p.capacity;
        }
        for chunk in run_bytes
            .chunks_exact(ROW_RUN_BYTES)
            .take(self.rows as usize)
        {
            // SAFETY: RowRun is plain old data of exactly ROW_RUN_BYTES bytes.
            let r: RowRun = unsafe { std::ptr::read_unaligned(chunk.as_ptr() as *const RowRun) };
            if self.plan.is_none() {
                // The row kernel's reads of each row, and the rows that went to the dense selection.
                stats.exact_rows += 1;
                stats.read_once += u64::from(r.attempts == 1);
                stats.row_reads += u64::from(r.attempts);
                stats.row_reads_most = stats.row_reads_most.max(r.attempts);
                if r.status == ROW_FALLBACK {
                    stats.fell_back = true;
                    stats.fallbacks += 1;
                }
                continue;
            }
            stats.attempts = stats.attempts.max(r.attempts);
            stats.total_attempts += u64::from(r.attempts);
            stats.retained += r.retained;
            stats.recall_failures += u64::from(r.recall_fail);
            stats.overflows += u64::from(r.overflow);
            if r.status == ROW_FALLBACK {
                stats.fell_back = true;
                stats.fallbacks += 1;
            }
        }
        stats.time_total = self.started.elapsed();
        Ok(stats)
    }
}

/// The CUDA branch of the dispatch: queue the call, then read its status once. A `forced` plan (one
/// the caller chose) always takes the sampled path.
pub(crate) fn topk(
    x: &Tensor,
    sel: &RowsSpec,
    opts: &TopKOptions,
    plan: Option<Plan>,
    forced: bool,
) -> Result<TopK> {
    let d = topk_deferred_spec(x, sel, opts, plan, None, !forced)?;
    let stats = d.status.read()?;
    Ok(TopK {
        values: d.values,
        indices: d.indices,
        stats,
    })
}

/// [`crate::topk`] on a CUDA tensor without any host synchronization: the outputs are ordinary
/// tensors on candle's stream; read the status when (and if) the statistics or the NaN check matter.
pub fn topk_deferred(x: &Tensor, k: usize, opts: &TopKOptions) -> Result<Deferred> {
    let spec = RowsSpec::new(x.dims(), k, opts.mode)?;
    let eps = opts.row_budget(spec.rows);
    let plan = crate::select::gpu_plan_for(spec.n, k, eps, spec.rows)?;
    topk_deferred_spec(x, &spec, opts, plan, None, true)
}

/// Only the first attempt of Prof-K with `plan` on every row of `x` (sample, threshold, filter and
/// the k <= R <= M check; no redraw, buffer top-k, fallback or output sort): the statistics count
/// each row's R < k and R > M once. The outputs of such a call are not meaningful.
#[cfg(feature = "bench")]
pub fn first_attempts(x: &Tensor, k: usize, plan: Plan, seed: u64) -> Result<SelectStats> {
    let opts = TopKOptions {
        seed,
        nan: NanPolicy::Largest,
        ..TopKOptions::default()
    };
    let spec = RowsSpec::new(x.dims(), k, crate::Mode::Rowwise)?;
    let stages = skip::REDRAW | skip::BUFFER | skip::FALLBACK | skip::OUTPUT;
    skip::with(stages, || {
        topk_deferred_spec(x, &spec, &opts, Some(plan), None, false)?
            .status
            .read()
    })
}

pub(crate) fn suffix(dtype: DType) -> Result<(&'static str, u32)> {
    match dtype {
        DType::F32 => Ok(("f32", 32)),
        DType::F16 => Ok(("f16", 16)),
        DType::BF16 => Ok(("bf16", 16)),
        other => Err(Error::DType(other)),
    }
}

/// The call on `x`; with `acc`, `x` is the flat residual and the accumulation is applied first: fused
/// into Prof-K's first attempt when it samples, else as a pass of its own. With `histogram_allowed`,
/// Prof-K on a shape that [`rows::path`] takes goes by the histogram selection instead of its plan.
fn topk_deferred_spec(
    x: &Tensor,
    spec: &RowsSpec,
    opts: &TopKOptions,
    plan: Option<Plan>,
    acc: Option<&abi::AccArgs>,
    histogram_allowed: bool,
) -> Result<Deferred> {
    let started = Instant::now();
    let Device::Cuda(dev) = x.device() else {
        return Err(Error::Param("the CUDA path needs a CUDA tensor".into()));
    };
    let (suffix, kb) = suffix(x.dtype())?;
    let x = x.contiguous()?;
    let shape = Shape {
        rows: spec.rows as u64,
        n: spec.n as u64,
        kb,
        ib: crate::select::index_bits(spec.n as u64),
    };
    let k = spec.k as u64;
    let mut arena = Arena::new(dev.cuda_stream())?;
    let (storage, layout) = x.storage_and_layout();
    let Storage::Cuda(cs) = &*storage else {
        return Err(Error::Param("the CUDA path needs a CUDA tensor".into()));
    };
    let elem = x.dtype().size_in_bytes() as u64;
    let base = match x.dtype() {
        DType::F32 => cs.as_cuda_slice::<f32>()?.device_ptr(&arena.stream).0,
        DType::F16 => cs.as_cuda_slice::<half::f16>()?.device_ptr(&arena.stream).0,
        _ => {
            cs.as_cuda_slice::<half::bf16>()?
                .device_ptr(&arena.stream)
                .0
        }
    };
    let input = Input {
        ptr: base + layout.start_offset() as u64 * elem,
        suffix,
        dtype: x.dtype(),
        mag: opts.by_magnitude,
    };
    let histogram = if histogram_allowed
        && acc.is_none()
        && opts.selector == Selector::Profk
        && !skip::has(skip::ROWS)
    {
        rows::path(&shape, k, arena.sms)
    } else {
        None
    };
    let plan = if opts.selector == Selector::Profk && histogram.is_none() {
        plan
    } else {
        None
    };
    // The record, and after it the sampled path's selection state: one zeroed range holds both.
    let record_bytes = spec.rows * ROW_RUN_BYTES + GLOBAL_BYTES;
    let state_bytes = if plan.is_some() {
        SelState::bytes(spec.rows)
            + rank_list::zeroed_bytes(shape.rows)
            + filter_bins_bytes(shape.rows)
    } else {
        0
    };
    let record =
        record::Record::zeroed(&arena.stream, record_bytes + state_bytes, arena.capturing)?;
    let record_ptr = record.ptr;
    let run = Dev::<u8>::at(record_ptr, spec.rows * ROW_RUN_BYTES);
    let global = Dev::<u8>::at(
        record_ptr + (spec.rows * ROW_RUN_BYTES) as u64,
        GLOBAL_BYTES,
    );
    let sampled_state = SelState::at(record_ptr + record_bytes as u64, spec.rows);
    let rank_counts = record_ptr + (record_bytes + SelState::bytes(spec.rows)) as u64;
    let filter_bins = rank_counts + rank_list::zeroed_bytes(shape.rows) as u64;
    arena.bytes += state_bytes;

    let fused = acc.filter(|_| k > 0 && shape.rows > 0 && plan.is_some());
    if let (Some(a), None) = (acc, fused) {
        accumulate::add_launch(&arena, a)?;
    }
    let (values, indices) = if k == 0 || shape.rows == 0 {
        let out: &[usize] = &spec.out_shape;
        (
            Tensor::zeros(out, x.dtype(), x.device())?,
            Tensor::zeros(out, DType::I64, x.device())?,
        )
    } else {
        let call = |sorted: Option<(u64, u64)>| rows::Call {
            input: &input,
            shape: &shape,
            k,
            count_nan: opts.nan == NanPolicy::Error,
            run: &run,
            global: &global,
            sorted: sorted.map(|ptrs| (ptrs, opts.order == Order::Desc)),
        };
        let fused_path = histogram.filter(|&path| rows::fused_output(path, &shape, k));
        if let Some(path) = fused_path {
            // The one-block histogram path writes the sorted output itself.
            let sorted = Outputs::alloc(&arena, x.dtype(), shape.rows * k)?;
            let call = call(Some(sorted.ptrs(&arena)));
            rows::select(&mut arena, &call, path)?;
            sorted.into_tensors(dev, &spec.out_shape)
        } else {
            // The k slots of every row, and where the selection wrote them, their composites.
            let (slots, comps) = match (opts.selector, plan, histogram) {
                (_, _, Some(path)) => (rows::select(&mut arena, &call(None), path)?, None),
                (Selector::Sort, _, _) => {
                    nan_scan(&arena, &input, &shape, opts, &global)?;
                    (sort_baseline(&mut arena, &input, &shape, k)?, None)
                }
                (Selector::Profk, Some(p), _) => {
                    let rec = (&run, &global, &sampled_state, (rank_counts, filter_bins));
                    match profk(&mut arena, &input, &shape, k, opts, p, rec, fused)? {
                        Selected::Slots(slots, comps) => (slots, comps),
                        Selected::Sorted(sorted) => {
                            let (values, indices) = sorted.into_tensors(dev, &spec.out_shape);
                            return Ok(deferred(
                                values, indices, storage, arena, record, opts, plan, &shape,
                                started,
                            ));
                        }
                    }
                }
                _ => {
                    nan_scan(&arena, &input, &shape, opts, &global)?;
                    let state = SelState::new(&mut arena, spec.rows)?;
                    let out = arena.alloc::<u64>(spec.rows * spec.k)?;
                    let s = Selection {
                        arena: &arena,
                        input: &input,
                        shape,
                        state: &state,
                        rows: RowList::default(),
                    };
                    s.threshold(&Source::Dense, k, true)?;
                    s.compact(&Source::Dense, &out, k, &run, None)?;
                    (out, None)
                }
            };
            output(
                &mut arena,
                dev,
                &input,
                &shape,
                k,
                opts.order,
                (&slots, comps.as_ref()),
                &spec.out_shape,
                x.dtype(),
            )?
        }
    };
    Ok(deferred(
        values, indices, storage, arena, record, opts, plan, &shape, started,
    ))
}

/// The call's outputs and its status, once every launch is queued (the input's storage released).
#[allow(clippy::too_many_arguments)]
fn deferred<S>(
    values: Tensor,
    indices: Tensor,
    storage: S,
    arena: Arena,
    record: record::Record,
    opts: &TopKOptions,
    plan: Option<Plan>,
    shape: &Shape,
    started: Instant,
) -> Deferred {
    drop(storage);
    Deferred {
        values,
        indices,
        status: DeviceStatus {
            record,
            stream: arena.stream.clone(),
            nan: opts.nan,
            plan,
            rows: shape.rows,
            aux_bytes: arena.bytes,
            started,
        },
    }
}

/// What Prof-K leaves for the output stage.
enum Selected {
    /// k row-local indices per row in any order, and where the selection wrote them, their
    /// composites at the same places.
    Slots(Dev<u64>, Option<Dev<u64>>),
    /// The outputs themselves, in order.
    Sorted(Outputs),
}

fn nan_scan(
    arena: &Arena,
    input: &Input,
    shape: &Shape,
    opts: &TopKOptions,
    global: &Dev<u8>,
) -> Result<()> {
    if opts.nan != NanPolicy::Error {
        return Ok(());
    }
    let total = shape.rows * shape.n;
    arena.launch_args(
        Family::Select,
        &format!("nan_scan_{}", input.suffix),
        arena.grid_for(total, 256, 16),
        256,
        &[Arg::U64(input.ptr), Arg::U64(total), Arg::U64(global.ptr)],
    )
}

/// Prof-K: attempts with the device-side check, the buffer top-k, the fallback; returns k row-local
/// indices per row (any order) and, for the values-descending order of composites of at most 64
/// bits, their composites at the same places (the output then gathers no key). Few rows in that
/// order get their outputs sorted straight from the buffers instead ([`rank_list`]). With `acc`, the
/// first attempt samples the accumulation and its pass writes it into the input (the residual);
/// later attempts read the updated input.
#[allow(clippy::too_many_arguments)]
fn profk(
    arena: &mut Arena,
    input: &Input,
    shape: &Shape,
    k: u64,
    opts: &TopKOptions,
    plan: Plan,
    (run, global, state, (rank_counts, filter_bins)): (&Dev<u8>, &Dev<u8>, &SelState, (u64, u64)),
    acc: Option<&abi::AccArgs>,
) -> Result<Selected> {
    let rows = shape.rows as usize;
    let (s, cap) = (plan.sample, plan.capacity);
    // Composites of at most 64 bits let small samples and buffers be selected inside one block, and a
    // large selection stop early and finish with one min pass.
    let narrow = shape.kb + shape.ib <= 64 && !skip::has(skip::WIDE);
    let block_sample = narrow && s <= sample::FUSED_MAX_SAMPLE;
    // One block per row selects the sample's threshold. With rows enough to fill the device it also
    // draws the sample (one launch); with fewer, a launch over every SM draws it first, so that one
    // block does not compute all S sampled positions alone.
    let fused_sample = block_sample && shape.rows >= u64::from(arena.sms);
    let block_buffer = narrow && cap <= sample::FUSED_MAX_SAMPLE;
    // Fewer rows than SMs: each row's sample is spread over many blocks, one launch an attempt
    // whether or not it is captured.
    let spread_allowed = narrow
        && !fused_sample
        && acc.is_none()
        && !skip::has(skip::SPREAD)
        && forced_spread().unwrap_or(true);
    let spread = spread_allowed
        .then(|| match crate::bench_env::number("PROFK_SPREAD_PER") {
            Some(per) => sample::spread_shape_per(s, plan.t, per),
            None => sample::spread_shape(s, plan.t),
        })
        .flatten();
    let cand = match spread {
        Some((bpr, _)) => arena.alloc::<u64>(rows * (bpr * plan.t) as usize)?,
        None => arena.alloc::<u64>(0)?,
    };
    let sample_len = if fused_sample || spread.is_some() {
        0
    } else {
        rows * s as usize
    };
    let skeys = arena.alloc::<u32>(sample_len)?;
    let sidx = arena.alloc::<u64>(sample_len)?;
    let buf = filter::Buffer {
        keys: arena.alloc::<u32>(rows * cap as usize)?,
        idx: arena.alloc::<u64>(rows * cap as usize)?,
        cap,
    };
    // A timing variant without the buffer top-k leaves the slots unwritten: zero them, they are gathered.
    let out = if skip::has(skip::BUFFER) {
        arena.zeros::<u64>(rows * k as usize)?
    } else {
        arena.alloc::<u64>(rows * k as usize)?
    };
    // Zeroed like the slots when a timing variant leaves them unwritten: composite 0 decodes to an
    // index in the row.
    let comps = match (narrow && opts.order == Order::Desc, skip::has(skip::BUFFER)) {
        (false, _) => None,
        (true, false) => Some(arena.alloc::<u64>(rows * k as usize)?),
        (true, true) => Some(arena.zeros::<u64>(rows * k as usize)?),
    };
    // Few rows, values descending: the sorted outputs come straight from each row's list (the
    // buffer, or the fallback's composites), where a cooperative launch may run.
    let listed = match comps.is_some() && !opts.approximate && arena.cooperative {
        true => crate::work_split::rank_list_slice(shape.rows, k, arena.sms),
        false => None,
    };
    // One row's pass may count its kept keys by bin for what follows it (`PROFK_FILTER_BINS=0` in a
    // benchmark keeps the paths that do without, to time both).
    let one_row_bins =
        shape.rows == 1 && acc.is_none() && crate::bench_env::var("PROFK_FILTER_BINS") != Some("0");
    // Its buffer selected by the histogram, where its selection is the cooperative launch.
    let by_bins = one_row_bins
        && narrow
        && listed.is_none()
        && !block_buffer
        && !opts.approximate
        && arena.cooperative
        && !skip::has(skip::BUFFER);
    let bin_edge = arena.alloc::<u64>(if by_bins { abi::BIN_EDGE_CAP } else { 0 })?;
    let bins = by_bins.then_some((filter_bins, bin_edge.ptr));
    // Its sorted outputs gathered by bin from its whole list.
    let ranked_by_bins =
        one_row_bins && listed.is_some() && rank_list::reads_whole(shape.rows, k, cap);
    let counted_bins = match by_bins || ranked_by_bins {
        true => filter_bins,
        false => 0,
    };
    let bucket = match listed {
        Some(_) => arena.alloc::<u64>(rank_list::bucket_len(shape.rows, k, cap))?,
        None => arena.alloc::<u64>(0)?,
    };
    // Each further attempt costs a few launches even when every row has passed.
    let attempts = if opts.approximate || skip::has(skip::REDRAW) {
        1
    } else {
        crate::work_split::device_attempts(
            shape.rows,
            shape.n,
            input.dtype.size_in_bytes() as u64,
            opts.row_budget(rows),
        )
    };
    // Row lists by status, written by every filter pass: later launches touch only their rows. An
    // attempt reads the lists of the one before while its pass writes the other pair.
    let lists = [row_lists(arena, rows)?, row_lists(arena, rows)?];
    let arena_ro: &Arena = arena;
    let all = RowList::default();
    let written_by = |attempt: u32| &lists[(attempt as usize - 1) % 2];
    let list = |attempt: u32, status: u32| RowList {
        ids: written_by(attempt).0.ptr + 4 * status as u64 * rows as u64,
        count: written_by(attempt).1.ptr + 4 * status as u64,
    };
    let sample_src = Source::List {
        keys: &skeys,
        idx: &sidx,
        cap: s,
        run: None,
        bounded: false,
        bins: None,
    };
    for attempt in 1..=attempts {
        let pending = if attempt == 1 {
            all
        } else {
            list(attempt - 1, ROW_PENDING)
        };
        let (ids, counts) = written_by(attempt);
        let acc = acc.filter(|_| attempt == 1);
        if let Some(shape_of) = spread {
            sample::spread_select(
                arena_ro,
                input,
                shape,
                (s, plan.t),
                shape_of,
                opts.seed,
                attempt,
                pending,
                &state.sel,
                &cand,
            )?;
        } else if fused_sample {
            sample::draw_and_select(
                arena_ro, input, shape, s, plan.t, opts.seed, attempt, pending, &state.sel, acc,
            )?;
        } else {
            let sel = Selection {
                arena: arena_ro,
                input,
                shape: *shape,
                state,
                rows: pending,
            };
            // A sample past one block is drawn inside its threshold's cooperative launch.
            let drawn = if block_sample || acc.is_some() {
                false
            } else {
                let draw = sample::args(
                    input, shape, s, opts.seed, attempt, pending, skeys.ptr, sidx.ptr,
                );
                sel.draw_and_kth(&draw, &sample_src, plan.t, narrow)?
            };
            if !drawn {
                sample::draw(
                    arena_ro, input, shape, s, opts.seed, attempt, pending, &skeys, &sidx, acc,
                )?;
                if block_sample {
                    sel.block_kth(&sample_src, plan.t)?;
                } else {
                    sel.kth(&sample_src, plan.t, narrow)?;
                }
            }
        }
        let pass = filter::Pass {
            state_sel: &state.sel,
            use_tmin: narrow,
            run,
            global,
            count_nan: attempt == 1 && opts.nan == NanPolicy::Error,
            last_attempt: attempt == attempts,
            approximate: opts.approximate,
            rows: pending,
            lists: Some((ids.ptr, counts.ptr)),
            bins: counted_bins,
        };
        match acc {
            Some(a) => {
                filter::run_accumulate(arena_ro, a, input, shape, k, &buf, &pass)?;
                Selection::classify(arena_ro, run, shape.rows, ids, counts)?;
            }
            None => filter::run(arena_ro, input, shape, k, &buf, &pass)?,
        }
    }
    let ok = Selection {
        arena: arena_ro,
        input,
        shape: *shape,
        state,
        rows: list(attempts, ROW_OK),
    };
    let buffer_src = Source::List {
        keys: &buf.keys,
        idx: &buf.idx,
        cap,
        run: Some(run),
        // The filter kept every element at or above the row's tmin (composites of 64 bits).
        bounded: narrow,
        bins,
    };
    let fb = Selection {
        rows: list(attempts, ROW_FALLBACK),
        ..ok
    };
    let comps_out = comps.as_ref();
    let fallback = !skip::has(skip::FALLBACK);
    if let (Some(slice), Some(comps)) = (listed, comps_out) {
        // The fallback's composites first: its rows' lists. The launch that reads each row's whole
        // list ranks a fallen-back row from its input and needs none.
        if fallback && !rank_list::reads_whole(shape.rows, k, cap) {
            fb.exact(&Source::Dense, &out, k, run, Some(comps))?;
        }
        let sorted = Outputs::alloc(arena_ro, input.dtype, shape.rows * k)?;
        if !skip::has(skip::OUTPUT) {
            let lists = rank_list::Lists {
                buffer: &buf,
                run,
                sel: &state.sel,
                comps,
            };
            let ptrs = sorted.ptrs(arena_ro);
            let shape_k = (k, slice);
            rank_list::launch(
                arena_ro,
                input,
                shape,
                shape_k,
                &lists,
                (rank_counts, if ranked_by_bins { filter_bins } else { 0 }),
                &bucket,
                ptrs,
            )?;
        }
        return Ok(Selected::Sorted(sorted));
    }
    // The dense fallback of the rows that failed every attempt shares the buffer's cooperative
    // launch where the buffer takes one.
    let fallen = |sel: &Selection| match fallback {
        true => sel.exact(&Source::Dense, &out, k, run, comps_out),
        false => Ok(()),
    };
    if skip::has(skip::BUFFER) {
        fallen(&fb)?;
    } else if block_buffer {
        ok.block_topk(&buffer_src, &out, k, comps_out)?;
        fallen(&fb)?;
    } else if fallback {
        ok.exact_then_dense(&buffer_src, &fb, &out, k, run, comps_out)?;
    } else {
        ok.exact(&buffer_src, &out, k, run, comps_out)?;
    }
    Ok(Selected::Slots(out, comps))
}

/// Bytes of the filter's histogram in the record: one row's, where the rows are one.
fn filter_bins_bytes(rows: u64) -> usize {
    match rows {
        1 => abi::FILTER_BINS_BYTES,
        _ => 0,
    }
}

fn row_lists(arena: &mut Arena, rows: usize) -> Result<(Dev<u32>, Dev<u32>)> {
    Ok((arena.alloc::<u32>(3 * rows)?, arena.alloc::<u32>(3)?))
}

/// `sort`: CUB radix sort of every row, then the first k.
fn sort_baseline(arena: &mut Arena, input: &Input, shape: &Shape, k: u64) -> Result<Dev<u64>> {
    let (rows, n) = (shape.rows as usize, shape.n as usize);
    let total = shape.rows * shape.n;
    let grid = arena.grid_for(total, 256, 16);
    let out = arena.alloc::<u64>(rows * k as usize)?;
    let (sorted, ib) = if shape.kb + shape.ib <= 64 {
        let c = arena.alloc::<u64>(total as usize)?;
        arena.launch_args(
            Family::Baselines,
            &format!("all_composite_{}", input.suffix),
            grid,
            256,
            &[
                Arg::U64(input.ptr),
                Arg::U64(shape.n),
                Arg::U64(total),
                Arg::I32(input.mag as i32),
                Arg::I32(shape.ib as i32),
                Arg::U64(c.ptr),
            ],
        )?;
        (
            sort::sort_keys_u64(arena, c, rows, n, true, shape.kb + shape.ib)?,
            shape.ib as i32,
        )
    } else {
        let keys = arena.alloc::<u32>(total as usize)?;
        let idx = arena.alloc::<u64>(total as usize)?;
        arena.launch_args(
            Family::Baselines,
            &format!("all_keys_{}", input.suffix),
            grid,
            256,
            &[
                Arg::U64(input.ptr),
                Arg::U64(shape.n),
                Arg::U64(total),
                Arg::I32(input.mag as i32),
                Arg::U64(keys.ptr),
                Arg::U64(idx.ptr),
            ],
        )?;
        (sort::sort_pairs_desc(arena, keys, idx, rows, n)?, -1)
    };
    arena.launch_args(
        Family::Baselines,
        "take_head",
        arena.grid_for(shape.rows * k, 256, 16),
        256,
        &[
            Arg::U64(sorted.ptr),
            Arg::U64(shape.n),
            Arg::U64(k),
            Arg::U64(shape.rows),
            Arg::I32(ib),
            Arg::U64(out.ptr),
        ],
    )?;
    Ok(out)
}

/// Whether one row's value order sorts its composites by key alone, then puts each run of equal keys
/// in index order (`tie_runs`): half the radix passes of the whole composite for f32 keys. Half
/// precision keys, with few distinct values among k, keep the whole composite's sort; so does a
/// benchmark that asks for it (`PROFK_VALUE_SORT=whole`).
fn sort_by_key_alone(shape: &Shape, k: u64) -> bool {
    shape.rows == 1
        && shape.kb == 32
        && k <= BY_KEY_MAX
        && crate::bench_env::var("PROFK_VALUE_SORT") != Some("whole")
}

/// Places a tie tile holds and the threads of its block (kernels/select.cu `TIE_TILE`, `TIE_THREADS`).
const TIE_TILE: u64 = 4096;
const TIE_THREADS: u32 = 1024;
/// Largest k sorted by key alone: a run of equal keys as long as k then spans at most 64 tiles, so
/// that each of its elements ranks itself among at most 64 sorted pieces.
const BY_KEY_MAX: u64 = 64 * TIE_TILE;

/// Largest k whose per-row sort runs in one block, fused with the gather.
const BLOCK_SORT_MAX: u64 = 4096;
/// The ranking kernels (kernels/select.cu `rank_gather`), the larger slice first: (outputs a block
/// places, kernel, threads a block).
const RANK_SLICES: [(u64, &str, u32); 2] =
    [(128, "rank_gather", 512), (64, "rank_gather_s64", 1024)];
/// Blocks of 512 threads an SM the ranked output may ask for: calls of more slices than that fill
/// the device with one block per row, or sort.
const RANK_BLOCKS_PER_SM: u64 = 2;

/// The ranking kernel, its blocks and its threads for `rows` rows of k outputs, where ranking suits
/// them (their slices of 128 fit the device at once): the smallest slices that still do in one wave,
/// so that more blocks share the work (slices of 32 were slower: every block still reads the row's k
/// keys). A benchmark may set the slice (`PROFK_RANK_SLICE=64|128`).
fn rank_kernel(rows: u64, k: u64, sms: u32) -> Option<(&'static str, u64, u32)> {
    let blocks = |slice: u64| rows * k.div_ceil(slice);
    // Blocks of 512 threads RANK_BLOCKS_PER_SM an SM, of 1024 half as many: one wave.
    let fits = |slice: u64, threads: u32| {
        blocks(slice) <= RANK_BLOCKS_PER_SM * sms as u64 * 512 / threads as u64
    };
    let (slice, _, threads) = RANK_SLICES[0];
    if !fits(slice, threads) {
        return None;
    }
    let forced = crate::bench_env::number("PROFK_RANK_SLICE");
    let (slice, name, threads) = RANK_SLICES
        .iter()
        .rev()
        .find(|&&(slice, _, threads)| forced.map_or(fits(slice, threads), |f| f == slice))
        .copied()?;
    // A benchmark may time the slices of 64 by 512 threads (`PROFK_RANK_THREADS=512`).
    if slice == 64 && crate::bench_env::number("PROFK_RANK_THREADS") == Some(512) {
        return Some(("rank_gather_s64_t512", blocks(slice), 512));
    }
    Some((name, blocks(slice), threads))
}

/// Whether a benchmark asks for the spread sample (`PROFK_SAMPLE=spread|block`), to time both under a
/// profiler.
fn forced_spread() -> Option<bool> {
    match crate::bench_env::var("PROFK_SAMPLE") {
        Some("spread") => Some(true),
        Some("block") => Some(false),
        _ => None,
    }
}

/// The output stage a benchmark sets (`PROFK_OUTPUT=rank|sort`), to time both on one shape: whether
/// to rank.
fn forced_ranking() -> Option<bool> {
    match crate::bench_env::var("PROFK_OUTPUT") {
        Some("rank") => Some(true),
        Some("sort") => Some(false),
        _ => None,
    }
}

/// Sorts the k slots of every row into the requested order and gathers values and i64 indices: few
/// rows by ranking (one launch), one block per row up to [`BLOCK_SORT_MAX`], else CUB's sorts. The
/// slots come with their composites where the selection wrote them: the one-launch forms then read
/// the descending order's keys instead of gathering them.
#[allow(clippy::too_many_arguments)]
fn output(
    arena: &mut Arena,
    dev: &CudaDevice,
    input: &Input,
    shape: &Shape,
    k: u64,
    order: Order,
    (slots, comps): (&Dev<u64>, Option<&Dev<u64>>),
    out_shape: &[usize],
    dtype: DType,
) -> Result<(Tensor, Tensor)> {
    let narrow = shape.kb + shape.ib <= 64 && !skip::has(skip::WIDE);
    let desc = order == Order::Desc;
    let rankable = (narrow || !desc) && !skip::has(skip::OUTPUT);
    let rank = rank_kernel(shape.rows, k, arena.sms);
    let ranked = rankable && forced_ranking().unwrap_or(rank.is_some());
    // Few rows: a block per slice of the output places it by ranking. More rows with k up to
    // BLOCK_SORT_MAX: a block a row sorts it, by the smallest block sort that holds k (padding is
    // sorted too). Either is one launch; the sorts also take the key width.
    let in_blocks = if ranked {
        // A forced ranking of more slices than fit at once takes the larger slices.
        let (slice, name, threads) = RANK_SLICES[0];
        let (name, blocks, threads) =
            rank.unwrap_or((name, shape.rows * k.div_ceil(slice), threads));
        Some((name, blocks, threads, None))
    } else if k <= BLOCK_SORT_MAX && rankable {
        let (threads, name) = match k {
            0..=512 => (128, "sort_gather_512"),
            513..=1024 => (256, "sort_gather_1024"),
            1025..=2048 => (256, "sort_gather_2048"),
            _ => (256, "sort_gather_4096"),
        };
        let grid = shape.rows.clamp(1, 16 * arena.sms as u64);
        Some((name, grid, threads, Some(Arg::I32(shape.kb as i32))))
    } else {
        None
    };
    if let Some((name, grid, threads, key_bits)) = in_blocks {
        let launch = |vals: u64, idx: u64| {
            let mut args = vec![
                Arg::U64(input.ptr),
                Arg::U64(shape.n),
                Arg::U64(k),
                Arg::U64(shape.rows),
                Arg::I32(input.mag as i32),
                Arg::I32(shape.ib as i32),
            ];
            args.extend(key_bits);
            args.extend([
                Arg::I32(desc as i32),
                Arg::U64(slots.ptr),
                Arg::U64(vals),
                Arg::U64(idx),
                Arg::U64(comps.map_or(0, |c| c.ptr)),
            ]);
            arena.launch_args(
                Family::Select,
                &format!("{name}_{}", input.suffix),
                grid,
                threads,
                &args,
            )
        };
        return finish(arena, dev, dtype, shape.rows * k, out_shape, launch);
    }
    let (rows, ku) = (shape.rows as usize, k as usize);
    let total = shape.rows * k;
    let grid = arena.grid_for(total, 256, 16);
    let (sorted, ib) = match order {
        _ if skip::has(skip::OUTPUT) => (*slots, -1),
        Order::Index => (
            sort::sort_keys_u64(arena, *slots, rows, ku, false, shape.ib)?,
            -1,
        ),
        Order::Desc if narrow => {
            // The selection wrote each slot's composite where it could; else they are gathered.
            let c = match comps {
                Some(c) => *c,
                None => {
                    let c = arena.alloc::<u64>(total as usize)?;
                    arena.launch_args(
                        Family::Select,
                        &format!("out_composite_{}", input.suffix),
                        grid,
                        256,
                        &[
                            Arg::U64(input.ptr),
                            Arg::U64(shape.n),
                            Arg::U64(k),
                            Arg::I32(input.mag as i32),
                            Arg::I32(shape.ib as i32),
                            Arg::U64(slots.ptr),
                            Arg::U64(c.ptr),
                            Arg::U64(total),
                        ],
                    )?;
                    c
                }
            };
            let whole = 0..shape.kb + shape.ib;
            if !sort_by_key_alone(shape, k) {
                (
                    sort::sort_keys_u64_bits(arena, c, rows, ku, true, whole)?,
                    shape.ib as i32,
                )
            } else {
                let by_key = shape.ib..whole.end;
                let sorted = sort::sort_keys_u64_bits(arena, c, rows, ku, true, by_key)?;
                // The composites the sort read take the sorted tiles of the longest runs.
                let tiles = total.div_ceil(TIE_TILE);
                let tile_long = arena.alloc::<u32>(tiles as usize)?;
                let grid = tiles.clamp(1, 2 * arena.sms as u64);
                let (s, t, f) = (sorted.ptr, c.ptr, tile_long.ptr);
                let ib = shape.ib as i32;
                let cb = whole.end as i32;
                let runs = [Arg::U64(s), Arg::U64(t), Arg::U64(f), Arg::U64(total)];
                let mut args = runs.to_vec();
                args.extend([Arg::I32(ib), Arg::I32(cb)]);
                arena.launch_args(Family::Select, "tie_runs", grid, TIE_THREADS, &args)?;
                // The gather places the long runs' elements as it writes them.
                let name = format!("tie_out_{}", input.suffix);
                let launch = |vals: u64, idx: u64| {
                    let mut args = runs.to_vec();
                    args.extend([Arg::I32(ib), Arg::U64(input.ptr), Arg::U64(shape.n)]);
                    args.extend([Arg::U64(vals), Arg::U64(idx)]);
                    arena.launch_args(Family::Select, &name, grid, TIE_THREADS, &args)
                };
                return finish(arena, dev, dtype, total, out_shape, launch);
            }
        }
        Order::Desc => {
            let by_index = sort::sort_keys_u64(arena, *slots, rows, ku, false, shape.ib)?;
            let keys = arena.alloc::<u32>(total as usize)?;
            arena.launch_args(
                Family::Select,
                &format!("out_keys_{}", input.suffix),
                grid,
                256,
                &[
                    Arg::U64(input.ptr),
                    Arg::U64(shape.n),
                    Arg::U64(k),
                    Arg::I32(input.mag as i32),
                    Arg::U64(by_index.ptr),
                    Arg::U64(keys.ptr),
                    Arg::U64(total),
                ],
            )?;
            (sort::sort_pairs_desc(arena, keys, by_index, rows, ku)?, -1)
        }
    };
    let launch = |vals: u64, idx: u64| {
        arena.launch_args(
            Family::Select,
            &format!("out_gather_{}", input.suffix),
            grid,
            256,
            &[
                Arg::U64(input.ptr),
                Arg::U64(shape.n),
                Arg::U64(k),
                Arg::I32(ib),
                Arg::U64(sorted.ptr),
                Arg::U64(vals),
                Arg::U64(idx),
                Arg::U64(total),
            ],
        )
    };
    finish(arena, dev, dtype, total, out_shape, launch)
}

/// A call's two outputs on the device, allocated before whichever launch writes them.
pub(crate) struct Outputs {
    values: OutValues,
    indices: CudaSlice<i64>,
}

enum OutValues {
    F32(CudaSlice<f32>),
    F16(CudaSlice<half::f16>),
    Bf16(CudaSlice<half::bf16>),
}

impl Outputs {
    /// Uninitialized outputs of `total` elements: every caller writes them in full.
    fn alloc(arena: &Arena, dtype: DType, total: u64) -> Result<Self> {
        let stream = &arena.stream;
        let n = total as usize;
        // SAFETY: every caller's launches write both outputs in full before they are read.
        let indices = unsafe { stream.alloc::<i64>(n) }.map_err(launch::drv)?;
        // SAFETY: as above.
        let values = unsafe {
            match dtype {
                DType::F32 => OutValues::F32(stream.alloc(n).map_err(launch::drv)?),
                DType::F16 => OutValues::F16(stream.alloc(n).map_err(launch::drv)?),
                _ => OutValues::Bf16(stream.alloc(n).map_err(launch::drv)?),
            }
        };
        Ok(Self { values, indices })
    }

    /// Device addresses of the values and the indices.
    fn ptrs(&self, arena: &Arena) -> (u64, u64) {
        let stream = &arena.stream;
        let values = match &self.values {
            OutValues::F32(v) => v.device_ptr(stream).0,
            OutValues::F16(v) => v.device_ptr(stream).0,
            OutValues::Bf16(v) => v.device_ptr(stream).0,
        };
        (values, self.indices.device_ptr(stream).0)
    }

    fn into_tensors(self, dev: &CudaDevice, shape: &[usize]) -> (Tensor, Tensor) {
        let values = match self.values {
            OutValues::F32(v) => wrap(v, dev, shape),
            OutValues::F16(v) => wrap(v, dev, shape),
            OutValues::Bf16(v) => wrap(v, dev, shape),
        };
        (values, wrap(self.indices, dev, shape))
    }
}

/// Allocates the two outputs, lets `launch(values, indices)` fill them, and wraps them as tensors.
fn finish(
    arena: &Arena,
    dev: &CudaDevice,
    dtype: DType,
    total: u64,
    out_shape: &[usize],
    launch: impl FnOnce(u64, u64) -> Result<()>,
) -> Result<(Tensor, Tensor)> {
    let outputs = Outputs::alloc(arena, dtype, total)?;
    let (values, indices) = outputs.ptrs(arena);
    launch(values, indices)?;
    Ok(outputs.into_tensors(dev, out_shape))
}

fn wrap<T: CudaDType>(slice: CudaSlice<T>, dev: &CudaDevice, shape: &[usize]) -> Tensor {
    let storage = Storage::Cuda(CudaStorage::wrap_cuda_slice(slice, dev.clone()));
    Tensor::from_storage(storage, shape, BackpropOp::none(), false)
}
