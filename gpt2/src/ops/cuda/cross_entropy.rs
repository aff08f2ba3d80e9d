//! Launches of the next-token cross-entropy kernels (`kernels/cross_entropy.cu`).
use super::{blocks, drv, function};
use candle_core::cuda::cudarc::driver::{CudaSlice, DevicePtr, PushKernelArg};
use candle_core::op::BackpropOp;
use candle_core::{CudaStorage, Layout, Result, Storage, Tensor};
use runtime::cuda::Fatbin;

static FATBIN: Fatbin = runtime::fatbin!("cross_entropy");
const THREADS: u32 = 512;

fn slice<'a, T: candle_core::cuda::CudaDType>(
    s: &'a CudaStorage,
    l: &Layout,
    what: &str,
) -> Result<(&'a CudaSlice<T>, usize)> {
    let (start, _) = l.contiguous_offsets().ok_or_else(|| {
        candle_core::Error::Msg(format!("next-token loss: {what} must be contiguous"))
    })?;
    Ok((s.as_cuda_slice::<T>()?, start))
}

/// The mean loss (a scalar) and the per-row log-sum-exp ([B (T - 1)], kept for the backward).
pub fn forward(
    logits: &CudaStorage,
    l1: &Layout,
    tokens: &CudaStorage,
    l2: &Layout,
) -> Result<(CudaStorage, Tensor)> {
    let (b, t, v) = l1.shape().dims3()?;
    let rows = b * (t - 1);
    let dev = logits.device.clone();
    let stream = dev.cuda_stream();
    let (x, x_off) = slice::<f32>(logits, l1, "logits")?;
    let (tok, tok_off) = slice::<u32>(tokens, l2, "tokens")?;
    let x_ptr = x.device_ptr(&stream).0 + 4 * x_off as u64;
    let tok_ptr = tok.device_ptr(&stream).0 + 4 * tok_off as u64;
    // SAFETY: every element is written by the kernels below before anything reads it.
    let lse: CudaSlice<f32> = unsafe { dev.alloc::<f32>(rows)? };
    let loss: CudaSlice<f32> = unsafe { dev.alloc::<f32>(rows)? };
    let mean: CudaSlice<f32> = unsafe { dev.alloc::<f32>(1)? };
    let (lse_ptr, loss_ptr, mean_ptr) = (
        lse.device_ptr(&stream).0,
        loss.device_ptr(&stream).0,
        mean.device_ptr(&stream).0,
    );
    let (t_i, v_i, rows_i) = (t as i32, v as i32, rows as i32);
    let f = function(logits, &FATBIN, "ce_rows")?;
    let mut args = stream.launch_builder(&f);
    args.arg(&x_ptr)
        .arg(&tok_ptr)
        .arg(&lse_ptr)
        .arg(&loss_ptr)
        .arg(&t_i)
        .arg(&v_i);
    let cfg = |count: usize| blocks(count, THREADS);
    if rows > 0 {
        // SAFETY: the arguments match the kernel's parameters; logits hold B T V elements, tokens
        // B T, lse and loss `rows`; all stay alive until the stream reaches the launch.
        unsafe { args.launch(cfg(rows)) }.map_err(|e| drv("ce_rows launch", e))?;
    }
    let f = function(logits, &FATBIN, "ce_mean")?;
    let mut args = stream.launch_builder(&f);
    args.arg(&loss_ptr).arg(&mean_ptr).arg(&rows_i);
    // SAFETY: as above; `mean` holds one element.
    unsafe { args.launch(cfg(1)) }.map_err(|e| drv("ce_mean launch", e))?;
    drop(loss);
    let lse = Tensor::from_storage(
        Storage::Cuda(CudaStorage::wrap_cuda_slice(lse, dev.clone())),
        rows,
        BackpropOp::none(),
        false,
    );
    Ok((CudaStorage::wrap_cuda_slice(mean, dev), lse))
}

/// d loss / d logits: `(softmax − onehot) · g / rows`, zeros for each sequence's last position.
pub fn grad(logits: &Tensor, tokens: &Tensor, lse: &Tensor, upstream: &Tensor) -> Result<Tensor> {
    let (b, t, v) = logits.dims3()?;
    let (xs, xl) = logits.storage_and_layout();
    let (ts, tl) = tokens.storage_and_layout();
    let (ls, ll) = lse.storage_and_layout();
    let (us, ul) = upstream.storage_and_layout();
    let (Storage::Cuda(xs), Storage::Cuda(ts), Storage::Cuda(ls), Storage::Cuda(us)) =
        (&*xs, &*ts, &*ls, &*us)
    else {
        return Err(candle_core::Error::Msg(
            "next-token loss: backward needs every input on one CUDA device".into(),
        ));
    };
    let dev = xs.device.clone();
    let stream = dev.cuda_stream();
    let ptr = |s: &CudaSlice<f32>, off: usize| s.device_ptr(&stream).0 + 4 * off as u64;
    let (x, x_off) = slice::<f32>(xs, xl, "logits")?;
    let (tok, tok_off) = slice::<u32>(ts, tl, "tokens")?;
    let (l, l_off) = slice::<f32>(ls, ll, "log-sum-exp")?;
    let (u, u_off) = slice::<f32>(us, ul, "upstream gradient")?;
    let (x_ptr, l_ptr, u_ptr) = (ptr(x, x_off), ptr(l, l_off), ptr(u, u_off));
    let tok_ptr = tok.device_ptr(&stream).0 + 4 * tok_off as u64;
    // SAFETY: the kernel writes all B T V elements.
    let out: CudaSlice<f32> = unsafe { dev.alloc::<f32>(b * t * v)? };
    let out_ptr = out.device_ptr(&stream).0;
    if b * t > 0 {
        let (t_i, v_i) = (t as i32, v as i32);
        let f = function(xs, &FATBIN, "ce_grad")?;
        let mut args = stream.launch_builder(&f);
        args.arg(&x_ptr)
            .arg(&tok_ptr)
            .arg(&l_ptr)
            .arg(&u_ptr)
            .arg(&out_ptr)
            .arg(&t_i)
            .arg(&v_i);
        let cfg = blocks(b * t, THREADS);
        // SAFETY: the arguments match the kernel's parameters; logits and the output hold B T V
        // elements, tokens B T, lse B (T - 1), the upstream gradient one; all alive until the
        // stream reaches the launch.
        unsafe { args.launch(cfg) }.map_err(|e| drv("ce_grad launch", e))?;
    }
    Ok(Tensor::from_storage(
        Storage::Cuda(CudaStorage::wrap_cuda_slice(out, dev)),
        (b, t, v),
        BackpropOp::none(),
        false,
    ))
}
