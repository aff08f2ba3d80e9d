//! Prof-K inside a captured CUDA graph: the CUDA path queues its whole call (sample, filter, count
//! check, on-device redraws and fallback, buffer top-k, output order) without a host synchronization
//! and carves its scratch from a per-stream workspace, so a call captured once replays on new data in
//! the captured input buffer, takes no device memory per replay, and still gives the exact answer.
//! CUDA only (graphs have no CPU form).
#![cfg(feature = "cuda")]
mod common;

use anyhow::{ensure, Context, Result};
use candle_core::cuda::cudarc::driver::result::mem_get_info;
use candle_core::cuda::cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use candle_core::{DType, Device, Tensor};
use common::{check_against_reference, normal, small_ints, tensor};
use profk::{Mode, Order, TopKOptions};

/// Inputs written into the captured buffer before each replay: every one must come out exact.
fn inputs(rows: usize, n: usize) -> Vec<(&'static str, Vec<f64>)> {
    let len = rows * n;
    let mut masked = normal(len, 3);
    // Each row's tail at -inf (the block-selection shape), its length varying by row.
    for (r, row) in masked.chunks_mut(n).enumerate() {
        let keep = (n / 4 + r * 7) % n + 1;
        row[keep..].fill(f64::NEG_INFINITY);
    }
    vec![
        ("normal", normal(len, 1)),
        ("ties", small_ints(len, 5, 2)),
        ("masked tails", masked),
        ("constant", vec![0.25; len]),
        ("normal again", normal(len, 4)),
    ]
}

fn replays_exactly(rows: usize, n: usize, k: usize, opts: &TopKOptions) -> Result<()> {
    let dev = Device::new_cuda(0)?;
    let stream = dev.as_cuda_device()?.cuda_stream();
    let what = format!("{rows}x{n}, k = {k}, {opts:?}");
    let x = Tensor::zeros((rows, n), DType::F32, &dev)?;
    // Outside the capture first: modules load and the stream's workspace grows to this shape's size.
    profk::cuda::topk_deferred(&x, k, opts)?.status.read()?;
    stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    let queued = profk::cuda::topk_deferred(&x, k, opts);
    // The capture ends whatever the call did, so that a failure inside it leaves the stream usable.
    // Auto-free: the outputs the graph allocates are freed and made again at each launch, in place.
    let graph = stream
        .end_capture(CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
    let queued = queued.with_context(|| format!("capturing {what}"))?;
    let graph = graph
        .with_context(|| format!("instantiating {what}"))?
        .with_context(|| format!("{what}: the capture recorded no work"))?;
    let mut free_after_first = None;
    for (name, values) in inputs(rows, n) {
        x.slice_set(&tensor(&values, &[rows, n], DType::F32, &dev)?, 0, 0)?;
        graph.launch()?;
        stream.synchronize()?;
        // Fixed workspace: after the first launch, replays take no device memory.
        let (free, _) = mem_get_info()?;
        let first = *free_after_first.get_or_insert(free);
        ensure!(
            free == first,
            "{what}, {name}: a replay took {} bytes of device memory",
            first.saturating_sub(free)
        );
        let got = profk::TopK {
            values: queued.values.clone(),
            indices: queued.indices.clone(),
            stats: queued.status.read()?,
        };
        check_against_reference(&x, k, opts, &got).with_context(|| format!("{what}, {name}"))?;
    }
    Ok(())
}

#[test]
fn selection_replays_inside_a_captured_graph() -> Result<()> {
    let rowwise = TopKOptions::default();
    let by_index = TopKOptions {
        order: Order::Index,
        ..TopKOptions::default()
    };
    let flat = TopKOptions {
        mode: Mode::Flat,
        ..TopKOptions::default()
    };
    // One long row (split over the SMs by the histogram selection), batched long rows (the sampled
    // path), short rows (one block per row), a flat selection across rows.
    for (rows, n, k, opts) in [
        (1, 1 << 20, 1024, &rowwise),
        (256, 1 << 16, 64, &by_index),
        (512, 4096, 32, &by_index),
        (256, 1 << 12, 2048, &flat),
    ] {
        replays_exactly(rows, n, k, opts)?;
    }
    Ok(())
}
