//! Launches of the fused causal-attention kernels (`kernels/attention.cu`).
use super::super::attention::{AttentionKernel, CausalAttention, FUSED_HEAD_DIM};
use super::{address, alloc, drv, function};
use candle_core::backend::BackendStorage;
use candle_core::cuda::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::{CudaStorage, DType, Layout, Result, Shape};
use runtime::cuda::Fatbin;

static FATBIN: Fatbin = runtime::fatbin!("attention");
/// Query rows per block (both kernels).
const QUERY_TILE: usize = 64;

pub fn forward(
    op: &CausalAttention,
    storage: &CudaStorage,
    layout: &Layout,
) -> Result<(CudaStorage, Shape)> {
    let (b, t, h, hd) = op.heads.of(layout.shape())?;
    if hd != FUSED_HEAD_DIM {
        return Err(candle_core::Error::Msg(format!(
            "causal_attention: the CUDA kernels need head size {FUSED_HEAD_DIM}, got {hd}"
        )));
    }
    let dtype = storage.dtype();
    let (name, threads) = match (dtype, op.kernel) {
        (DType::BF16, AttentionKernel::Auto) => ("attn_mma_bf16", 128),
        (DType::F16, AttentionKernel::Auto) => ("attn_mma_f16", 128),
        (DType::BF16, AttentionKernel::Scalar) => ("attn_scalar_bf16", 64),
        (DType::F16, AttentionKernel::Scalar) => ("attn_scalar_f16", 64),
        (DType::F32, _) => ("attn_scalar_f32", 64),
        (other, _) => {
            return Err(candle_core::Error::UnsupportedDTypeForOp(
                other,
                "causal-attention",
            ))
        }
    };
    let stream = storage.device.cuda_stream();
    let qkv = address(storage, layout, &stream)?;
    if qkv % 16 != 0 {
        return Err(candle_core::Error::Msg(
            "causal_attention: the input must start 16-byte aligned".into(),
        ));
    }
    let (out, out_ptr) = alloc(storage, dtype, b * t * h * hd)?;
    if b * t * h == 0 {
        return Ok((out, Shape::from((b, t, h * hd))));
    }
    let f = function(storage, &FATBIN, name)?;
    let (t_len, n_head) = (t as i32, h as i32);
    let scale_log2 = std::f32::consts::LOG2_E / (hd as f32).sqrt();
    let cfg = LaunchConfig {
        grid_dim: (t.div_ceil(QUERY_TILE) as u32, h as u32, b as u32),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut args = stream.launch_builder(&f);
    args.arg(&qkv)
        .arg(&out_ptr)
        .arg(&t_len)
        .arg(&n_head)
        .arg(&scale_log2);
    // SAFETY: the arguments match the kernel's parameters; the input holds B x T x 3 x H x 64
    // elements and the output B x T x H x 64, both alive until the stream reaches the launch
    // (candle frees device memory in stream order).
    unsafe { args.launch(cfg) }.map_err(|e| drv("attention kernel launch", e))?;
    Ok((out, Shape::from((b, t, h * hd))))
}
