//! The CUDA side of [`crate::accumulate`] (kernels/accumulate.cu): the chunk table of the spans,
//! the plain accumulation pass, and the Prof-K call whose first attempt is fused with the update.
use candle_core::cuda::cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use candle_core::{Storage, Tensor};
use std::sync::Arc;

use super::abi::{AccArgs, AccChunk};
use super::launch::{drv, Arena};
use super::module::Family;
use crate::accumulate::{Accumulation, FlatSpans};
use crate::select::{Plan, Selection as RowsSpec, TopK};
use crate::{tuning::Tuning, Error, Mode, Result, TopKOptions};

/// Coordinates per work item of the pass: one iteration of a block (512 threads × 4 loads × 4
/// lanes).
const CHUNK: u64 = 1 << 13;

/// The spans' chunk table and starts on the device of one context, built once per [`FlatSpans`],
/// and the last gradient address list: a step whose gradients live where the last step's did (a
/// training loop reusing its buffers) copies nothing to the device.
pub struct Table {
    ctx: usize,
    chunks: CudaSlice<AccChunk>,
    starts: CudaSlice<u64>,
    nchunks: u64,
    grads: Option<(Vec<u64>, CudaSlice<u64>)>,
}

impl Table {
    fn new(spans: &FlatSpans, stream: &Arc<CudaStream>) -> Result<Self> {
        let starts = spans.starts();
        let mut chunks = Vec::new();
        for (t, w) in starts.windows(2).enumerate() {
            let mut flat = w[0];
            while flat < w[1] {
                let len = CHUNK.min(w[1] - flat);
                chunks.push(AccChunk {
                    flat,
                    len: len as u32,
                    tensor: t as u32,
                });
                flat += len;
            }
        }
        let nchunks = chunks.len() as u64;
        if chunks.is_empty() {
            chunks.push(AccChunk::default());
        }
        Ok(Self {
            ctx: stream.context().cu_ctx() as usize,
            chunks: stream.clone_htod(&chunks).map_err(drv)?,
            starts: stream.clone_htod(starts).map_err(drv)?,
            nchunks,
            grads: None,
        })
    }
}

/// Device address of the first element of a contiguous f32 tensor, and its stream.
fn address(t: &Tensor) -> Result<(u64, Arc<CudaStream>)> {
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cuda(cs) = &*storage else {
        return Err(Error::Param("expected a CUDA tensor".into()));
    };
    let stream = cs.device.cuda_stream();
    let base = cs.as_cuda_slice::<f32>()?.device_ptr(&stream).0;
    Ok((base + 4 * layout.start_offset() as u64, stream))
}

/// The kernel arguments of one accumulation (its tables live in the spans' device slot).
struct Launch {
    args: AccArgs,
    stream: Arc<CudaStream>,
}

fn prepare(spans: &FlatSpans, acc: &Accumulation, grads: &[Option<Tensor>]) -> Result<Launch> {
    let (residual, stream) = address(acc.residual)?;
    let velocity = acc.velocity.map(address).transpose()?.map_or(0, |(p, _)| p);
    // A span without a gradient to add (or an empty one) has address 0: the kernels read only the
    // residual there.
    let ptrs: Vec<u64> = grads
        .iter()
        .map(|g| match g {
            None => Ok(0),
            Some(g) => address(g).map(|(p, _)| p),
        })
        .collect::<Result<_>>()?;
    let ptrs = if ptrs.is_empty() { vec![0] } else { ptrs };
    let mut slot = spans.device.lock().unwrap_or_else(|e| e.into_inner());
    let ctx = stream.context().cu_ctx() as usize;
    if slot.as_ref().is_none_or(|t| t.ctx != ctx) {
        *slot = Some(Table::new(spans, &stream)?);
    }
    let table = slot.as_mut().expect("built above");
    if table.grads.as_ref().is_none_or(|(host, _)| *host != ptrs) {
        // The list it replaces is freed in stream order, after the launches that read it.
        let dev = stream.clone_htod(&ptrs).map_err(drv)?;
        table.grads = Some((ptrs, dev));
    }
    let grads_dev = &table.grads.as_ref().expect("set above").1;
    let args = AccArgs {
        residual,
        velocity,
        grads: grads_dev.device_ptr(&stream).0,
        starts: table.starts.device_ptr(&stream).0,
        chunks: table.chunks.device_ptr(&stream).0,
        nchunks: table.nchunks,
        n: spans.total() as u64,
        spans: spans.len() as u32,
        mu: acc.momentum,
    };
    Ok(Launch { args, stream })
}

/// Queues the plain accumulation pass.
pub(crate) fn add_launch(arena: &Arena, a: &AccArgs) -> Result<()> {
    if a.nchunks == 0 {
        return Ok(());
    }
    let grid = a.nchunks.clamp(1, 4 * arena.sms as u64);
    arena.launch_struct(Family::Accumulate, "acc_add", grid, 512, a)
}

/// [`crate::accumulate`] on CUDA: one launch over all spans, queued on candle's stream.
pub(crate) fn add(spans: &FlatSpans, acc: &Accumulation, grads: &[Option<Tensor>]) -> Result<()> {
    let launch = prepare(spans, acc, grads)?;
    let arena = Arena::new(launch.stream.clone(), Tuning::active())?;
    add_launch(&arena, &launch.args)
}

/// [`crate::topk_accumulate`] on CUDA: the accumulation fused into Prof-K's first attempt (or a
/// pass of its own before an exact selection), then the status read, which waits for the call.
pub(crate) fn topk(
    spans: &FlatSpans,
    acc: &Accumulation,
    grads: &[Option<Tensor>],
    k: usize,
    opts: &TopKOptions,
    plan: Option<Plan>,
) -> Result<TopK> {
    let launch = prepare(spans, acc, grads)?;
    let spec = RowsSpec::new(&[spans.total()], k, Mode::Flat)?;
    let call = super::Call {
        selection: &spec,
        opts,
        plan,
        accumulation: Some(&launch.args),
        histogram_allowed: false,
        tuning: Tuning::active(),
    };
    let d = super::queue(acc.residual, &call)?;
    let stats = d.status.read()?;
    Ok(TopK {
        values: d.values,
        indices: d.indices,
        stats,
    })
}
