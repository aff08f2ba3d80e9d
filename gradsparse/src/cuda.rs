//! The CUDA apply of error feedback: one launch applies the selected coordinates (zero the residual
//! there, lazy AdamW, write the parameter found by binary search over the spans). candle's own scatter
//! kernels loop over a 1-D index in one thread, hence this. The residual update is `profk::accumulate`
//! (or fused into the selection, `profk::topk_accumulate`).
use crate::error::{Error, Result};
use crate::layout::FlatLayout;
use candle_core::cuda::cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg,
};
use candle_core::{Storage, Tensor};
use runtime::cuda::Fatbin;
use std::sync::{Arc, Mutex, OnceLock};

static FATBIN: Fatbin = runtime::fatbin!("ef");

#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct AdamArgs {
    idx: u64,
    grad: u64,
    residual: u64,
    velocity: u64,
    m: u64,
    v: u64,
    span_end: u64,
    params: u64,
    k: u64,
    spans: u32,
    beta1: f32,
    beta2: f32,
    scale_m: f32,
    scale_v: f32,
    eps: f32,
    lr: f32,
    decay: f32,
}
// SAFETY: plain-old-data mirroring `struct AdamArgs` in kernels/ef.cu.
unsafe impl DeviceRepr for AdamArgs {}

fn drv(e: impl std::fmt::Debug) -> Error {
    Error::Candle(candle_core::Error::Msg(format!("CUDA: {e:?}")))
}

fn function(stream: &Arc<CudaStream>, name: &str) -> Result<CudaFunction> {
    FATBIN
        .function(stream.context(), name)
        .map_err(|e| Error::Candle(e.into()))
}

/// Device address of a contiguous f32 (or i64) tensor's first element, and its stream.
fn address(t: &Tensor) -> Result<(u64, Arc<CudaStream>)> {
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cuda(cs) = &*storage else {
        return Err(Error::Candle(candle_core::Error::Msg(
            "expected a CUDA tensor".into(),
        )));
    };
    let stream = cs.device.cuda_stream();
    let offset = layout.start_offset() as u64;
    let (base, elem) = match t.dtype() {
        candle_core::DType::F32 => (cs.as_cuda_slice::<f32>()?.device_ptr(&stream).0, 4),
        candle_core::DType::I64 => (cs.as_cuda_slice::<i64>()?.device_ptr(&stream).0, 8),
        other => {
            return Err(Error::Candle(candle_core::Error::Msg(format!(
                "unexpected dtype {other:?}"
            ))))
        }
    };
    Ok((base + offset * elem, stream))
}

/// The span ends and parameter addresses of the last apply, on the device: a training loop applies
/// to the same parameters every step, so after the first step nothing is copied to the device.
struct ApplyTables {
    stream: usize,
    span_end_host: Vec<u64>,
    params_host: Vec<u64>,
    span_end: CudaSlice<u64>,
    params: CudaSlice<u64>,
}

fn apply_tables() -> &'static Mutex<Option<ApplyTables>> {
    static TABLES: OnceLock<Mutex<Option<ApplyTables>>> = OnceLock::new();
    TABLES.get_or_init(|| Mutex::new(None))
}

/// The state a sparse apply touches.
pub struct ApplyState<'a> {
    pub residual: &'a Tensor,
    pub velocity: Option<&'a Tensor>,
    pub m: &'a Tensor,
    pub v: &'a Tensor,
    pub params: &'a [Tensor],
    pub layout: &'a FlatLayout,
}

/// AdamW hyperparameters of one apply, bias correction resolved.
pub struct ApplyStep {
    pub beta1: f64,
    pub beta2: f64,
    pub scale_m: f64,
    pub scale_v: f64,
    pub eps: f64,
    pub lr: f64,
    pub weight_decay: f64,
}

/// Zeroes the residual (and velocity) at `indices` and applies lazy AdamW there, in one launch.
pub fn sparse_apply(s: &ApplyState, indices: &Tensor, grad: &Tensor, h: &ApplyStep) -> Result<()> {
    let k = indices.elem_count() as u64;
    if k == 0 {
        return Ok(());
    }
    let indices = indices.contiguous()?;
    let grad = grad.to_dtype(candle_core::DType::F32)?.contiguous()?;
    let (idx, stream) = address(&indices)?;
    let span_end: Vec<u64> = s
        .layout
        .spans()
        .iter()
        .map(|sp| (sp.offset + sp.len) as u64)
        .collect();
    let params: Vec<u64> = s
        .params
        .iter()
        .map(|p| address(p).map(|(a, _)| a))
        .collect::<Result<_>>()?;
    let mut tables = apply_tables().lock().unwrap_or_else(|e| e.into_inner());
    let key = stream.cu_stream() as usize;
    if tables
        .as_ref()
        .is_none_or(|t| t.stream != key || t.span_end_host != span_end || t.params_host != params)
    {
        // A table it replaces is freed in stream order, after the launches that read it.
        *tables = Some(ApplyTables {
            stream: key,
            span_end: stream.clone_htod(&span_end).map_err(drv)?,
            params: stream.clone_htod(&params).map_err(drv)?,
            span_end_host: span_end,
            params_host: params,
        });
    }
    let t = tables.as_ref().expect("set above");
    let (span_end, params_dev) = (&t.span_end, &t.params);
    let args = AdamArgs {
        idx,
        grad: address(&grad)?.0,
        residual: address(s.residual)?.0,
        velocity: s.velocity.map(address).transpose()?.map_or(0, |(p, _)| p),
        m: address(s.m)?.0,
        v: address(s.v)?.0,
        span_end: span_end.device_ptr(&stream).0,
        params: params_dev.device_ptr(&stream).0,
        k,
        spans: span_end.len() as u32,
        beta1: h.beta1 as f32,
        beta2: h.beta2 as f32,
        scale_m: h.scale_m as f32,
        scale_v: h.scale_v as f32,
        eps: h.eps as f32,
        lr: h.lr as f32,
        decay: (1.0 - h.lr * h.weight_decay) as f32,
    };
    let f = function(&stream, "ef_sparse_adamw")?;
    let mut b = stream.launch_builder(&f);
    b.arg(&args);
    let blocks = k.div_ceil(256).min(132 * 16) as u32;
    let cfg = LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: `args` mirrors AdamArgs; the tables and inputs outlive the synchronize below.
    unsafe { b.launch(cfg) }.map_err(drv)?;
    stream.synchronize().map_err(drv)?;
    Ok(())
}
