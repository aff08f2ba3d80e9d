//! The CUDA path of [`crate::topk`]: Prof-K and the `sort` and `radix` baselines on candle's CUDA
//! storage and stream.
//!
//! One call queues its whole pipeline on candle's stream with no host synchronization in between:
//! [`route`] names the algorithm of its shape (the histogram selection, Prof-K's sampled path, the
//! sort, or a dense radix selection), that algorithm queues its launches, and `output.rs` sorts the
//! k of every row into the requested order. [`topk_deferred`] returns the outputs and a
//! [`DeviceStatus`] without waiting; [`crate::topk`] reads the status once at the end to report NaN
//! errors and fill [`SelectStats`]. The benchmark's [`Tuning`] travels with the call's arena.
mod abi;
pub(crate) mod accumulate;
mod baselines;
#[cfg(feature = "bench")]
pub mod bench;
mod filter;
mod launch;
mod module;
mod output;
mod rank_list;
mod record;
pub mod route;
mod rows;
mod sample;
mod sampled;
mod select;
mod sort;

use candle_core::{cuda::cudarc::driver::DevicePtr, DType, Device, Storage, Tensor};
use launch::Dev;
use std::time::Instant;

use crate::select::{Plan, SelectStats, Selection as RowsSpec, TopK};
use crate::{tuning::Tuning, Error, NanPolicy, Order, Result, TopKOptions};
use abi::{RowRun, GLOBAL_BYTES, ROW_FALLBACK, ROW_RUN_BYTES};
use launch::Arena;
use output::Outputs;
use route::Route;

pub use launch::Arena as CallArena;

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
    pub key_bits: u32,
    /// Index bits: enough for n - 1.
    pub index_bits: u32,
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
                // The row kernel's reads of each row, and the rows that went to the dense
                // selection.
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
    let call = Call {
        selection: sel,
        opts,
        plan,
        accumulation: None,
        histogram_allowed: !forced,
        tuning: Tuning::active(),
    };
    let d = queue(x, &call)?;
    let stats = d.status.read()?;
    Ok(TopK {
        values: d.values,
        indices: d.indices,
        stats,
    })
}

/// [`crate::topk`] on a CUDA tensor without any host synchronization: the outputs are ordinary
/// tensors on candle's stream; read the status when (and if) the statistics or the NaN check
/// matter.
pub fn topk_deferred(x: &Tensor, k: usize, opts: &TopKOptions) -> Result<Deferred> {
    topk_deferred_tuned(x, k, opts, Tuning::active())
}

/// [`topk_deferred`] under `tuning`.
pub fn topk_deferred_tuned(
    x: &Tensor,
    k: usize,
    opts: &TopKOptions,
    tuning: Tuning,
) -> Result<Deferred> {
    let selection = RowsSpec::new(x.dims(), k, opts.mode)?;
    let eps = opts.row_budget(selection.rows);
    let plan = crate::select::gpu_plan_tuned(selection.n, k, eps, selection.rows, &tuning)?;
    let call = Call {
        selection: &selection,
        opts,
        plan,
        accumulation: None,
        histogram_allowed: true,
        tuning,
    };
    queue(x, &call)
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
    let selection = RowsSpec::new(x.dims(), k, crate::Mode::Rowwise)?;
    let call = Call {
        selection: &selection,
        opts: &opts,
        plan: Some(plan),
        accumulation: None,
        histogram_allowed: false,
        tuning: Tuning::first_attempt_only(),
    };
    queue(x, &call)?.status.read()
}

/// [`topk_deferred`] with `plan` on every row, the sampled path whatever the shape.
#[cfg(feature = "bench")]
fn topk_deferred_with_plan(
    x: &Tensor,
    k: usize,
    opts: &TopKOptions,
    plan: Plan,
) -> Result<Deferred> {
    let selection = RowsSpec::new(x.dims(), k, opts.mode)?;
    let call = Call {
        selection: &selection,
        opts,
        plan: Some(plan),
        accumulation: None,
        histogram_allowed: false,
        tuning: Tuning::active(),
    };
    queue(x, &call)
}

pub(crate) fn suffix(dtype: DType) -> Result<(&'static str, u32)> {
    match dtype {
        DType::F32 => Ok(("f32", 32)),
        DType::F16 => Ok(("f16", 16)),
        DType::BF16 => Ok(("bf16", 16)),
        other => Err(Error::DType(other)),
    }
}

/// One call as the entry points describe it.
struct Call<'a> {
    selection: &'a RowsSpec,
    opts: &'a TopKOptions,
    /// Prof-K's plan, where sampling pays.
    plan: Option<Plan>,
    /// With it, the input is the flat residual and the accumulation is applied first: fused into
    /// Prof-K's first attempt when it samples, else as a pass of its own.
    accumulation: Option<&'a abi::AccArgs>,
    /// Whether Prof-K may take the histogram selection ([`route`]).
    histogram_allowed: bool,
    tuning: Tuning,
}

/// The per-row outcomes (`RowRun` a row) and the call's `Global` record: where every path reports.
pub(crate) struct Records {
    pub run: Dev<u8>,
    pub global: Dev<u8>,
}

/// Queues `call` on `x`: the route of its shape, that algorithm's selection, the output stage.
fn queue(x: &Tensor, call: &Call) -> Result<Deferred> {
    let started = Instant::now();
    let (spec, opts) = (call.selection, call.opts);
    let Device::Cuda(dev) = x.device() else {
        return Err(Error::Param("the CUDA path needs a CUDA tensor".into()));
    };
    let (suffix, key_bits) = suffix(x.dtype())?;
    let x = x.contiguous()?;
    let shape = Shape {
        rows: spec.rows as u64,
        n: spec.n as u64,
        key_bits,
        index_bits: crate::select::index_bits(spec.n as u64),
    };
    let k = spec.k as u64;
    let mut arena = Arena::new(dev.cuda_stream(), call.tuning)?;
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
    let histogram_allowed = call.histogram_allowed && call.accumulation.is_none();
    let route = route::route(
        opts.selector,
        &shape,
        k,
        call.plan,
        histogram_allowed,
        arena.sms,
        &call.tuning,
    );
    let plan = match route {
        Route::Sampled(plan) => Some(plan),
        _ => None,
    };
    // The record, and after it the sampled path's zeroed state: one zeroed range holds both.
    let record_bytes = spec.rows * ROW_RUN_BYTES + GLOBAL_BYTES;
    let state_bytes = match plan {
        Some(_) => sampled::ZeroedState::bytes(shape.rows),
        None => 0,
    };
    let record =
        record::Record::zeroed(&arena.stream, record_bytes + state_bytes, arena.capturing)?;
    let records = Records {
        run: Dev::<u8>::at(record.ptr, spec.rows * ROW_RUN_BYTES),
        global: Dev::<u8>::at(
            record.ptr + (spec.rows * ROW_RUN_BYTES) as u64,
            GLOBAL_BYTES,
        ),
    };
    let sampled_state = sampled::ZeroedState::at(record.ptr + record_bytes as u64, shape.rows);
    arena.bytes += state_bytes;

    let fused = call
        .accumulation
        .filter(|_| k > 0 && shape.rows > 0 && plan.is_some());
    if let (Some(a), None) = (call.accumulation, fused) {
        accumulate::add_launch(&arena, a)?;
    }
    let status = |arena: Arena, record| DeviceStatus {
        record,
        stream: arena.stream.clone(),
        nan: opts.nan,
        plan,
        rows: shape.rows,
        aux_bytes: arena.bytes,
        started,
    };
    if k == 0 || shape.rows == 0 {
        let out: &[usize] = &spec.out_shape;
        let values = Tensor::zeros(out, x.dtype(), x.device())?;
        let indices = Tensor::zeros(out, DType::I64, x.device())?;
        drop(storage);
        return Ok(Deferred {
            values,
            indices,
            status: status(arena, record),
        });
    }
    let histogram_call = |sorted: Option<(u64, u64)>| rows::Call {
        input: &input,
        shape: &shape,
        k,
        count_nan: opts.nan == NanPolicy::Error,
        run: &records.run,
        global: &records.global,
        sorted: sorted.map(|ptrs| (ptrs, opts.order == Order::Desc)),
    };
    // The k slots of every row, and where the selection wrote them, their composites.
    let selected = match route {
        Route::Histogram(path) if rows::fused_output(path, &shape, k, &call.tuning) => {
            // The one-block histogram path writes the sorted output itself.
            let sorted = Outputs::alloc(&arena, x.dtype(), shape.rows * k)?;
            let histogram_call = histogram_call(Some(sorted.ptrs(&arena)));
            rows::select(&mut arena, &histogram_call, path)?;
            Selected::Sorted(sorted)
        }
        Route::Histogram(path) => {
            Selected::Slots(rows::select(&mut arena, &histogram_call(None), path)?, None)
        }
        Route::Sort => {
            baselines::nan_scan(&arena, &input, &shape, opts, &records.global)?;
            let slots = baselines::sort(&mut arena, &input, &shape, k)?;
            Selected::Slots(slots, None)
        }
        Route::Sampled(plan) => {
            let sampled_call = sampled::Call {
                input: &input,
                shape: &shape,
                k,
                opts,
                plan,
                records: &records,
                state: &sampled_state,
                accumulation: fused,
            };
            sampled::select(&mut arena, &sampled_call)?
        }
        Route::Dense => {
            baselines::nan_scan(&arena, &input, &shape, opts, &records.global)?;
            let slots = baselines::dense(&mut arena, &input, &shape, k, &records.run)?;
            Selected::Slots(slots, None)
        }
    };
    let (values, indices) = match selected {
        Selected::Sorted(sorted) => sorted.into_tensors(dev, &spec.out_shape),
        Selected::Slots(slots, composites) => output::output(
            &mut arena,
            dev,
            &input,
            &shape,
            k,
            opts.order,
            (&slots, composites.as_ref()),
            &spec.out_shape,
            x.dtype(),
        )?,
    };
    drop(storage);
    Ok(Deferred {
        values,
        indices,
        status: status(arena, record),
    })
}

/// What a selection leaves for the output stage.
pub(crate) enum Selected {
    /// k row-local indices per row in any order, and where the selection wrote them, their
    /// composites at the same places.
    Slots(Dev<u64>, Option<Dev<u64>>),
    /// The outputs themselves, in order.
    Sorted(Outputs),
}
