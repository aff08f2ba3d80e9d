//! Launch of the layer-norm kernel (`kernels/layer_norm.cu`): one warp per row, one read and one
//! write of the row from memory (candle's kernel ran at about a tenth of the bandwidth here).
use super::{address, alloc, blocks, cuda_storage, drv, dtype_suffix, function, tensor_address};
use candle_core::backend::BackendStorage;
use candle_core::cuda::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::op::BackpropOp;
use candle_core::{CudaStorage, DType, Layout, Result, Storage, Tensor};
use runtime::cuda::Fatbin;

static FATBIN: Fatbin = runtime::fatbin!("layer_norm");
const ROWS_PER_BLOCK: usize = 8;

/// `x` [rows, d], `weight` and `bias` [d], all contiguous with one dtype.
pub fn layer_norm(x: &Tensor, weight: &Tensor, bias: &Tensor, eps: f32) -> Result<Tensor> {
    let (rows, d) = x.dims2()?;
    let name = format!("layer_norm_{}", dtype_suffix(x.dtype(), "layer_norm")?);
    let (x_ptr, w_ptr, b_ptr) = (
        tensor_address(x)?,
        tensor_address(weight)?,
        tensor_address(bias)?,
    );
    let (storage, _) = x.storage_and_layout();
    let cs = cuda_storage(&storage, "layer_norm: expected a CUDA tensor")?;
    let (out, y_ptr) = alloc(cs, cs.dtype(), rows * d)?;
    if rows > 0 {
        let stream = cs.device.cuda_stream();
        let f = function(cs, &FATBIN, &name)?;
        let (rows_i, d_i) = (rows as i32, d as i32);
        let cfg = blocks(rows.div_ceil(ROWS_PER_BLOCK), 32 * ROWS_PER_BLOCK as u32);
        let mut args = stream.launch_builder(&f);
        args.arg(&x_ptr)
            .arg(&w_ptr)
            .arg(&b_ptr)
            .arg(&y_ptr)
            .arg(&rows_i)
            .arg(&d_i)
            .arg(&eps);
        // SAFETY: the arguments match the kernel's parameters; x and y hold rows x d elements, w
        // and b d elements, all alive until the stream reaches the launch.
        unsafe { args.launch(cfg) }.map_err(|e| drv("layer_norm launch", e))?;
    }
    drop(storage);
    Ok(Tensor::from_storage(
        Storage::Cuda(out),
        (rows, d),
        BackpropOp::none(),
        false,
    ))
}

/// Most threads per row in the training kernels (`__launch_bounds__` in the kernel file).
const TRAIN_MAX_THREADS: usize = 512;
/// Row chunks of the backward kernel, about: each writes one partial row of dweight and dbias.
const TRAIN_BWD_CHUNKS: usize = 256;

/// The columns each thread keeps in registers (a compiled variant) and the threads per row.
fn train_launch_shape(d: usize) -> Result<(usize, u32)> {
    let cpt = [4, 8, 16]
        .into_iter()
        .find(|c| d.div_ceil(*c) <= TRAIN_MAX_THREADS)
        .ok_or_else(|| {
            candle_core::Error::Msg(format!(
                "layer_norm_train: the CUDA kernels take rows of at most {} elements, got {d}",
                16 * TRAIN_MAX_THREADS
            ))
        })?;
    Ok((cpt, (d.div_ceil(cpt).div_ceil(32) * 32) as u32))
}

fn f32_tensor(storage: CudaStorage, len: usize) -> Tensor {
    Tensor::from_storage(Storage::Cuda(storage), len, BackpropOp::none(), false)
}

/// Forward of `layer_norm_train`: `x` [rows, d], `weight` and `bias` [d], contiguous, one dtype.
/// Returns y and the per-row mean and 1 / sqrt(var + eps) as f32 tensors [rows].
pub fn forward_with_stats(
    x: (&CudaStorage, &Layout),
    weight: (&CudaStorage, &Layout),
    bias: (&CudaStorage, &Layout),
    eps: f32,
) -> Result<(CudaStorage, Tensor, Tensor)> {
    let (rows, d) = x.1.shape().dims2()?;
    let name = dtype_suffix(x.0.dtype(), "layer_norm_train")?;
    let (cpt, threads) = train_launch_shape(d)?;
    let stream = x.0.device.cuda_stream();
    let x_ptr = address(x.0, x.1, &stream)?;
    let w_ptr = address(weight.0, weight.1, &stream)?;
    let b_ptr = address(bias.0, bias.1, &stream)?;
    let (y, y_ptr) = alloc(x.0, x.0.dtype(), rows * d)?;
    let (mean, mean_ptr) = alloc(x.0, DType::F32, rows)?;
    let (rstd, rstd_ptr) = alloc(x.0, DType::F32, rows)?;
    if rows > 0 {
        let f = function(x.0, &FATBIN, &format!("layer_norm_stats_{name}_{cpt}"))?;
        let d_i = d as i32;
        let cfg = blocks(rows, threads);
        let mut args = stream.launch_builder(&f);
        args.arg(&x_ptr)
            .arg(&w_ptr)
            .arg(&b_ptr)
            .arg(&y_ptr)
            .arg(&mean_ptr)
            .arg(&rstd_ptr)
            .arg(&d_i)
            .arg(&eps);
        // SAFETY: the arguments match the kernel's parameters; x and y hold rows x d elements, w
        // and b d elements, mean and rstd rows floats, all alive until the stream reaches the launch.
        unsafe { args.launch(cfg) }.map_err(|e| drv("layer_norm_train launch", e))?;
    }
    Ok((y, f32_tensor(mean, rows), f32_tensor(rstd, rows)))
}

/// Backward of `layer_norm_train`: `x` and `dy` [rows, d], `weight` [d] (contiguous, one dtype),
/// `mean` and `rstd` [rows] f32 from [`forward_with_stats`]. Returns (dx, dweight, dbias); the
/// column sums are added in a fixed order, so equal inputs give bit-equal gradients.
pub fn backward(
    x: &Tensor,
    weight: &Tensor,
    dy: &Tensor,
    mean: &Tensor,
    rstd: &Tensor,
) -> Result<(Tensor, Tensor, Tensor)> {
    let (rows, d) = x.dims2()?;
    let name = dtype_suffix(x.dtype(), "layer_norm_train")?;
    let (cpt, threads) = train_launch_shape(d)?;
    let (x_ptr, w_ptr, dy_ptr) = (
        tensor_address(x)?,
        tensor_address(weight)?,
        tensor_address(dy)?,
    );
    let (mean_ptr, rstd_ptr) = (tensor_address(mean)?, tensor_address(rstd)?);
    let (storage, _) = x.storage_and_layout();
    let cs = cuda_storage(&storage, "layer_norm_train backward: expected CUDA tensors")?;
    let stream = cs.device.cuda_stream();
    let rows_per_chunk = rows.div_ceil(TRAIN_BWD_CHUNKS).max(1);
    let chunks = rows.div_ceil(rows_per_chunk);
    let (dx, dx_ptr) = alloc(cs, x.dtype(), rows * d)?;
    let (dw, dw_ptr) = alloc(cs, x.dtype(), d)?;
    let (db, db_ptr) = alloc(cs, x.dtype(), d)?;
    let (_partial, partial_ptr) = alloc(cs, DType::F32, 2 * chunks * d)?;
    let (rows_i, d_i, per_chunk_i, chunks_i) =
        (rows as i32, d as i32, rows_per_chunk as i32, chunks as i32);
    if rows > 0 {
        let f = function(cs, &FATBIN, &format!("layer_norm_bwd_{name}_{cpt}"))?;
        let cfg = blocks(chunks, threads);
        let mut args = stream.launch_builder(&f);
        args.arg(&x_ptr)
            .arg(&w_ptr)
            .arg(&dy_ptr)
            .arg(&mean_ptr)
            .arg(&rstd_ptr)
            .arg(&dx_ptr)
            .arg(&partial_ptr)
            .arg(&rows_i)
            .arg(&d_i)
            .arg(&per_chunk_i);
        // SAFETY: the arguments match the kernel's parameters; x, dy and dx hold rows x d elements,
        // w d elements, mean and rstd rows floats, partial 2 x chunks x d floats, all alive until
        // the stream reaches the launch (`_partial` is freed in stream order after it).
        unsafe { args.launch(cfg) }.map_err(|e| drv("layer_norm_train backward launch", e))?;
    }
    let f = function(cs, &FATBIN, &format!("layer_norm_bwd_reduce_{name}"))?;
    let cfg = LaunchConfig {
        grid_dim: (d.div_ceil(32) as u32, 2, 1),
        block_dim: (32, 8, 1),
        shared_mem_bytes: 0,
    };
    let mut args = stream.launch_builder(&f);
    args.arg(&partial_ptr)
        .arg(&dw_ptr)
        .arg(&db_ptr)
        .arg(&chunks_i)
        .arg(&d_i);
    // SAFETY: the arguments match the kernel's parameters; partial holds 2 x chunks x d floats
    // (written by the launch before, in stream order), dw and db d elements each.
    unsafe { args.launch(cfg) }.map_err(|e| drv("layer_norm_train reduce launch", e))?;
    drop(storage);
    let wrap = |s: CudaStorage, shape: &[usize]| {
        Tensor::from_storage(Storage::Cuda(s), shape, BackpropOp::none(), false)
    };
    Ok((wrap(dx, &[rows, d]), wrap(dw, &[d]), wrap(db, &[d])))
}
