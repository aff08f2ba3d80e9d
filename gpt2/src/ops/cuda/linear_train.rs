//! The CUDA side of `linear_train`: cuBLASLt products (see [`super::linear::gemm`]) and the
//! kernels of `kernels/linear_train.cu`.
//!
//! With row-major x [n, k], W [k, m], dZ [n, m] read as column-major transposes:
//! forward `Zᵀ = Wᵀ xᵀ` (A = W, B = x); `dxᵀ = W dZᵀ` (A = W transposed, B = dZ);
//! `dWᵀ = dZᵀ x` (A = dZ, B = x transposed).
use super::super::grad_sink::GradSink;
use super::super::linear_train::{Activation, LinearTrain};
use super::linear::{gemm, Gemm};
use super::{address, alloc, blocks, cuda_storage, drv, dtype_suffix, function, tensor_address};
use candle_core::backend::BackendStorage;
use candle_core::cuda::cudarc::cublaslt::sys::cublasLtEpilogue_t as Epilogue;
use candle_core::cuda::cudarc::driver::{CudaStream, LaunchConfig, PushKernelArg};
use candle_core::op::BackpropOp;
use candle_core::{CudaStorage, DType, Layout, Result, Shape, Storage, Tensor};
use runtime::cuda::Fatbin;
use std::sync::Arc;

static FATBIN: Fatbin = runtime::fatbin!("linear_train");
/// Rows per partial column sum (`ROWS_PER_CHUNK` in the kernel).
const ROWS_PER_CHUNK: usize = 64;

fn tensor(storage: CudaStorage, shape: impl Into<Shape>) -> Tensor {
    Tensor::from_storage(Storage::Cuda(storage), shape, BackpropOp::none(), false)
}

fn no_algorithm(what: &str) -> candle_core::Error {
    candle_core::Error::Msg(format!(
        "linear_train: cuBLASLt has no algorithm for {what}"
    ))
}

/// `act(x W + b)`; keeps `Z = x W + b` in `op` for GELU's backward.
pub fn forward(
    op: &LinearTrain,
    (x, x_l): (&CudaStorage, &Layout),
    (w, w_l): (&CudaStorage, &Layout),
    (b, b_l): (&CudaStorage, &Layout),
) -> Result<(CudaStorage, Shape)> {
    let dtype = x.dtype();
    let sfx = dtype_suffix(dtype, "linear_train on CUDA (f32, bf16, f16)")?;
    let (n, k) = x_l.shape().dims2()?;
    let m = w_l.shape().dims2()?.1;
    let stream = x.device.cuda_stream();
    let (y, y_ptr) = alloc(x, dtype, n * m)?;
    let mut g = Gemm {
        dtype,
        m,
        n,
        k,
        a: address(w, w_l, &stream)?,
        trans_a: false,
        b: address(x, x_l, &stream)?,
        trans_b: false,
        c: None,
        d: y_ptr,
        epilogue: Epilogue::CUBLASLT_EPILOGUE_BIAS,
        bias: Some(address(b, b_l, &stream)?),
        aux: None,
    };
    if op.activation == Activation::Identity {
        if n * m > 0 && !gemm(&stream, &g)? {
            return Err(no_algorithm("the forward product"));
        }
        return Ok((y, Shape::from((n, m))));
    }
    let (z, z_ptr) = alloc(x, dtype, n * m)?;
    if n * m > 0 {
        // cuBLASLt writes Z beside gelu(Z) when the auxiliary output's leading dimension is a
        // multiple of 8; otherwise the product writes Z and one elementwise pass makes gelu(Z).
        g.epilogue = Epilogue::CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
        g.aux = Some(z_ptr);
        if m % 8 != 0 || !gemm(&stream, &g)? {
            g.epilogue = Epilogue::CUBLASLT_EPILOGUE_BIAS;
            g.aux = None;
            g.d = z_ptr;
            if !gemm(&stream, &g)? {
                return Err(no_algorithm("the forward product"));
            }
            gelu(x, &stream, sfx, z_ptr, y_ptr, n * m)?;
        }
    }
    op.keep(tensor(z, (n, m)));
    Ok((y, Shape::from((n, m))))
}

fn gelu(
    like: &CudaStorage,
    stream: &Arc<CudaStream>,
    sfx: &str,
    z: u64,
    y: u64,
    len: usize,
) -> Result<()> {
    let f = function(like, &FATBIN, &format!("gelu_forward_{sfx}"))?;
    let cfg = blocks(len.div_ceil(256).min(8192), 256);
    let mut args = stream.launch_builder(&f);
    args.arg(&z).arg(&y).arg(&len);
    // SAFETY: the arguments match the kernel's parameters; both buffers hold `len` elements and
    // live until the stream reaches the launch.
    unsafe { args.launch(cfg) }.map_err(|e| drv("gelu kernel launch", e))?;
    Ok(())
}

/// `(dx, dW, db)` from `x` [n, k], `w` [k, m], `dy` [n, m] (contiguous) and, for GELU, the kept
/// pre-activation `z` [n, m]. With a sink, dW is added into the sink's slice by the product itself
/// (`beta = 1`, the slice as both C and D) and not returned.
pub fn backward(
    x: &Tensor,
    w: &Tensor,
    dy: &Tensor,
    z: Option<&Tensor>,
    sink: Option<&GradSink>,
) -> Result<(Tensor, Option<Tensor>, Tensor)> {
    let dtype = x.dtype();
    let sfx = dtype_suffix(dtype, "linear_train on CUDA (f32, bf16, f16)")?;
    let (n, k) = x.dims2()?;
    let m = w.dim(1)?;
    if n == 0 {
        return Ok((
            x.zeros_like()?,
            sink.is_none().then(|| w.zeros_like()).transpose()?,
            Tensor::zeros(m, dtype, x.device())?,
        ));
    }
    // The sink's slice: f32 and contiguous, checked at registration.
    let sink_ptr = sink
        .map(|s| Ok::<_, candle_core::Error>(tensor_address(&s.buffer)? + 4 * s.offset as u64))
        .transpose()?;
    if sink.is_some() && dtype != DType::F32 {
        return Err(candle_core::Error::Msg(format!(
            "linear_train: a gradient sink needs f32 products, not {dtype:?}"
        )));
    }
    let (storage, dy_l) = dy.storage_and_layout();
    let like = cuda_storage(&storage, "linear_train: expected CUDA tensors")?;
    // `like` (dY's storage, read-locked until the end) gives the device to allocate on.
    let stream = like.device.cuda_stream();
    let dy_ptr = address(like, dy_l, &stream)?;
    let (x_ptr, w_ptr) = (tensor_address(x)?, tensor_address(w)?);

    // dZ and the bias gradient in one pass over dY.
    let chunks = n.div_ceil(ROWS_PER_CHUNK);
    let (partials, partial_ptr) = alloc(like, DType::F32, chunks * m)?;
    let (dz, dz_ptr) = match z {
        Some(_) => {
            let (s, p) = alloc(like, dtype, n * m)?;
            (Some(s), p)
        }
        None => (None, dy_ptr),
    };
    let z_ptr = z.map(tensor_address).transpose()?.unwrap_or(0);
    let dz_out = if dz.is_some() { dz_ptr } else { 0 };
    let (rows, cols) = (n as i32, m as i32);
    let f = function(like, &FATBIN, &format!("column_partials_{sfx}"))?;
    let mut args = stream.launch_builder(&f);
    args.arg(&dy_ptr)
        .arg(&z_ptr)
        .arg(&dz_out)
        .arg(&partial_ptr)
        .arg(&rows)
        .arg(&cols);
    let cfg = LaunchConfig {
        grid_dim: (m.div_ceil(32) as u32, chunks as u32, 1),
        block_dim: (32, 8, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: the arguments match the kernel's parameters; dY, Z and dZ hold n x m elements,
    // the partials chunks x m, all alive until the stream reaches the launch.
    unsafe { args.launch(cfg) }.map_err(|e| drv("column-sum kernel launch", e))?;
    let (db, db_ptr) = alloc(like, dtype, m)?;
    let f = function(like, &FATBIN, &format!("sum_partials_{sfx}"))?;
    let chunk_count = chunks as i32;
    let mut args = stream.launch_builder(&f);
    args.arg(&partial_ptr)
        .arg(&db_ptr)
        .arg(&chunk_count)
        .arg(&cols);
    let cfg = blocks(m.div_ceil(256), 256);
    // SAFETY: as above; the bias gradient holds m elements.
    unsafe { args.launch(cfg) }.map_err(|e| drv("column-sum kernel launch", e))?;
    drop(partials);

    let (dx, dx_ptr) = alloc(like, dtype, n * k)?;
    let (dw, dw_ptr) = match sink_ptr {
        Some(p) => (None, p),
        None => {
            let (s, p) = alloc(like, dtype, k * m)?;
            (Some(s), p)
        }
    };
    let products = [
        // dxᵀ [k, n] = W [k, m] · dZᵀ [m, n]
        (k, n, m, w_ptr, true, dz_ptr, false, dx_ptr, None),
        // dWᵀ [m, k] = dZᵀ [m, n] · x [n, k] (+ the sink's slice, in place)
        (m, k, n, dz_ptr, false, x_ptr, true, dw_ptr, sink_ptr),
    ];
    for (gm, gn, gk, a, trans_a, b, trans_b, d, c) in products {
        let g = Gemm {
            dtype,
            m: gm,
            n: gn,
            k: gk,
            a,
            trans_a,
            b,
            trans_b,
            c,
            d,
            epilogue: Epilogue::CUBLASLT_EPILOGUE_DEFAULT,
            bias: None,
            aux: None,
        };
        if gm * gn > 0 && !gemm(&stream, &g)? {
            return Err(no_algorithm("a backward product"));
        }
    }
    // dZ's buffer is freed in stream order after the products that read it.
    drop(dz);
    Ok((
        tensor(dx, (n, k)),
        dw.map(|dw| tensor(dw, (k, m))),
        tensor(db, m),
    ))
}
