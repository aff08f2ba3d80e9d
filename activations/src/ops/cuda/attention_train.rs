//! The differentiable causal attention on CUDA: cuBLAS strided-batched GEMMs (one call per
//! sequence, batched over heads) reading q, k, v straight from the packed [B, T, 3, H, hd] input
//! and writing d(qkv) in that layout, around the two row kernels of `kernels/attention_train.cu`.
//!
//! Row-major X [r, c] with leading dimension ld is column-major Xᵀ to cuBLAS, so each product is
//! issued transposed: S = Q Kᵀ as Sᵀ = K Qᵀ, O = P V as Oᵀ = Vᵀ Pᵀ, and so on.
use super::super::attention_train::Dims;
use super::{address, alloc, drv, function};
use candle_core::backend::BackendStorage;
use candle_core::cuda::cudarc::cublas::{result as blas, sys};
use candle_core::cuda::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::{CudaStorage, DType, Layout, Result, Shape};
use std::ffi::c_void;

const FATBIN: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/attention_train.fatbin"));
/// Score rows per block of the row kernels (one warp each).
const ROWS_PER_BLOCK: usize = 8;
const F32_BYTES: u64 = 4;

/// A strided matrix operand: address of the first head's block, leading dimension, head stride
/// (both in elements).
#[derive(Clone, Copy)]
struct Operand {
    ptr: u64,
    ld: usize,
    stride: usize,
}

impl Operand {
    /// The operand moved by `elems` elements.
    fn at(self, elems: usize) -> Self {
        Self {
            ptr: self.ptr + elems as u64 * F32_BYTES,
            ..self
        }
    }
}

/// C = alpha op(A) op(B) over `batch` heads, column-major (m x n, inner size k), f32 storage with
/// TF32 tensor cores when candle's reduced-precision flag is set.
#[allow(clippy::too_many_arguments)]
fn gemm(
    storage: &CudaStorage,
    (trans_a, trans_b): (bool, bool),
    (m, n, k): (usize, usize, usize),
    alpha: f32,
    a: Operand,
    b: Operand,
    c: Operand,
    batch: usize,
) -> Result<()> {
    let op = |t: bool| {
        if t {
            sys::cublasOperation_t::CUBLAS_OP_T
        } else {
            sys::cublasOperation_t::CUBLAS_OP_N
        }
    };
    let compute = if candle_core::cuda::gemm_reduced_precision_f32() {
        sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32
    } else {
        sys::cublasComputeType_t::CUBLAS_COMPUTE_32F
    };
    let int = |v: usize, what: &str| {
        i32::try_from(v).map_err(|_| {
            candle_core::Error::Msg(format!("causal_attention_train: {what} {v} exceeds i32"))
        })
    };
    let beta = 0f32;
    let handle = storage.device.cublas_handle();
    let f32_type = sys::cudaDataType_t::CUDA_R_32F;
    // SAFETY: the operands are device addresses of live f32 buffers holding every element the
    // strides and leading dimensions reach (checked by the callers' shapes); the handle is bound
    // to candle's stream, so the call is ordered with the kernels before and after it.
    unsafe {
        blas::gemm_strided_batched_ex(
            *handle.handle(),
            op(trans_a),
            op(trans_b),
            int(m, "m")?,
            int(n, "n")?,
            int(k, "k")?,
            &alpha as *const f32 as *const c_void,
            a.ptr as *const c_void,
            f32_type,
            int(a.ld, "lda")?,
            a.stride as i64,
            b.ptr as *const c_void,
            f32_type,
            int(b.ld, "ldb")?,
            b.stride as i64,
            &beta as *const f32 as *const c_void,
            c.ptr as *mut c_void,
            f32_type,
            int(c.ld, "ldc")?,
            c.stride as i64,
            int(batch, "heads")?,
            compute,
            sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT_TENSOR_OP,
        )
    }
    .map_err(|e| drv("attention GEMM", e))
}

/// One launch of a row kernel over the B x H x T score rows.
fn rows_kernel(
    storage: &CudaStorage,
    name: &str,
    ptrs: &[u64],
    t: usize,
    rows: usize,
) -> Result<()> {
    let f = function(storage, "attention_train", FATBIN, name)?;
    let stream = storage.device.cuda_stream();
    let (t_len, n_rows) = (t as i32, rows as i64);
    let cfg = LaunchConfig {
        grid_dim: (rows.div_ceil(ROWS_PER_BLOCK) as u32, 1, 1),
        block_dim: (32 * ROWS_PER_BLOCK as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut args = stream.launch_builder(&f);
    for p in ptrs {
        args.arg(p);
    }
    args.arg(&t_len).arg(&n_rows);
    // SAFETY: the arguments match the kernel's parameters; each buffer holds rows x t f32 values
    // and stays alive until the stream reaches the launch (candle frees in stream order).
    unsafe { args.launch(cfg) }.map_err(|e| drv(name, e))?;
    Ok(())
}

fn check_f32(storage: &CudaStorage, what: &str) -> Result<()> {
    match storage.dtype() {
        DType::F32 => Ok(()),
        other => Err(candle_core::Error::Msg(format!(
            "causal_attention_train: {what} must be f32, got {other:?}"
        ))),
    }
}

/// (out [B, T, H hd], P [B, H, T, T], out's shape) of the packed input.
pub fn forward(
    dims: Dims,
    storage: &CudaStorage,
    layout: &Layout,
) -> Result<(CudaStorage, CudaStorage, Shape)> {
    check_f32(storage, "qkv")?;
    let (b, t, h, hd) = dims.of(layout.shape())?;
    let d = h * hd;
    let stream = storage.device.cuda_stream();
    let qkv = address(storage, layout, &stream)?;
    let (out, out_ptr) = alloc(storage, DType::F32, b * t * d)?;
    let (probs, p_ptr) = alloc(storage, DType::F32, b * h * t * t)?;
    let shape = Shape::from((b, t, d));
    if b * t * h == 0 {
        return Ok((out, probs, shape));
    }
    let scale = 1.0 / (hd as f32).sqrt();
    let x = Operand {
        ptr: qkv,
        ld: 3 * d,
        stride: hd,
    };
    let o = Operand {
        ptr: out_ptr,
        ld: d,
        stride: hd,
    };
    let p = Operand {
        ptr: p_ptr,
        ld: t,
        stride: t * t,
    };
    for bi in 0..b {
        let (q, k) = (x.at(bi * t * 3 * d), x.at(bi * t * 3 * d + d));
        // Sᵀ [t_k, t_q] = K Qᵀ, scaled.
        gemm(
            storage,
            (true, false),
            (t, t, hd),
            scale,
            k,
            q,
            p.at(bi * h * t * t),
            h,
        )?;
    }
    rows_kernel(storage, "attn_train_softmax_f32", &[p_ptr], t, b * h * t)?;
    for bi in 0..b {
        let v = x.at(bi * t * 3 * d + 2 * d);
        // Oᵀ [hd, t_q] = Vᵀ Pᵀ.
        gemm(
            storage,
            (false, false),
            (hd, t, t),
            1.0,
            v,
            p.at(bi * h * t * t),
            o.at(bi * t * d),
            h,
        )?;
    }
    Ok((out, probs, shape))
}

/// d(qkv) [B, T, 3 H hd] from qkv, d(out) [B, T, H hd] and P [B, H, T, T].
pub fn backward(
    dims: Dims,
    s_qkv: &CudaStorage,
    l_qkv: &Layout,
    s_grad: &CudaStorage,
    l_grad: &Layout,
    s_probs: &CudaStorage,
    l_probs: &Layout,
) -> Result<(CudaStorage, Shape)> {
    check_f32(s_qkv, "qkv")?;
    check_f32(s_grad, "output gradient")?;
    check_f32(s_probs, "probabilities")?;
    let (b, t, h, hd) = dims.of(l_qkv.shape())?;
    let d = h * hd;
    if l_grad.shape().dims() != [b, t, d] || l_probs.shape().dims() != [b, h, t, t] {
        return Err(candle_core::Error::Msg(format!(
            "causal_attention_train: backward got qkv {:?}, output gradient {:?}, probabilities {:?}",
            l_qkv.shape(),
            l_grad.shape(),
            l_probs.shape()
        )));
    }
    let stream = s_qkv.device.cuda_stream();
    let qkv = address(s_qkv, l_qkv, &stream)?;
    let grad = address(s_grad, l_grad, &stream)?;
    let p_ptr = address(s_probs, l_probs, &stream)?;
    let (dx, dx_ptr) = alloc(s_qkv, DType::F32, b * t * 3 * d)?;
    let shape = l_qkv.shape().clone();
    if b * t * h == 0 {
        return Ok((dx, shape));
    }
    let (_ds_buf, ds_ptr) = alloc(s_qkv, DType::F32, b * h * t * t)?;
    let scale = 1.0 / (hd as f32).sqrt();
    let x = Operand {
        ptr: qkv,
        ld: 3 * d,
        stride: hd,
    };
    let dxo = Operand {
        ptr: dx_ptr,
        ld: 3 * d,
        stride: hd,
    };
    let g = Operand {
        ptr: grad,
        ld: d,
        stride: hd,
    };
    let p = Operand {
        ptr: p_ptr,
        ld: t,
        stride: t * t,
    };
    let ds = Operand {
        ptr: ds_ptr,
        ld: t,
        stride: t * t,
    };
    for bi in 0..b {
        let (v, go) = (x.at(bi * t * 3 * d + 2 * d), g.at(bi * t * d));
        // dPᵀ [t_k, t_q] = V dOᵀ.
        gemm(
            s_qkv,
            (true, false),
            (t, t, hd),
            1.0,
            v,
            go,
            ds.at(bi * h * t * t),
            h,
        )?;
        // dVᵀ [hd, t_k] = dOᵀ P.
        let dv = dxo.at(bi * t * 3 * d + 2 * d);
        gemm(
            s_qkv,
            (false, true),
            (hd, t, t),
            1.0,
            go,
            p.at(bi * h * t * t),
            dv,
            h,
        )?;
    }
    rows_kernel(
        s_qkv,
        "attn_train_softmax_bwd_f32",
        &[p_ptr, ds_ptr],
        t,
        b * h * t,
    )?;
    for bi in 0..b {
        let base = bi * t * 3 * d;
        let (q, k) = (x.at(base), x.at(base + d));
        let ds_b = ds.at(bi * h * t * t);
        // dQᵀ [hd, t_q] = Kᵀ dSᵀ and dKᵀ [hd, t_k] = Qᵀ dS, both scaled.
        gemm(
            s_qkv,
            (false, false),
            (hd, t, t),
            scale,
            k,
            ds_b,
            dxo.at(base),
            h,
        )?;
        gemm(
            s_qkv,
            (false, true),
            (hd, t, t),
            scale,
            q,
            ds_b,
            dxo.at(base + d),
            h,
        )?;
    }
    Ok((dx, shape))
}
