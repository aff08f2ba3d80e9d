//! The CUDA side of the sparse step: launches of `kernels/sparse.cu` and `kernels/optim.cu` (fatbins
//! built by build.rs, loaded once per context without JIT), CUB's stable pair sort from `kernels/sort.cu`,
//! and the scores' cuBLASLt matmul with its bias + ReLU epilogue.
use candle_core::cuda::cudarc::cublaslt::{Activation, CudaBlasLT, Matmul, MatmulConfig};
use candle_core::cuda::cudarc::driver::{
    CudaFunction, CudaStream, CudaView, DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg,
};
use candle_core::cuda::{CudaDType, CudaDevice, CudaStorage};
use candle_core::{bail, DType, Layout, Result, Storage, Tensor};
use runtime::cuda::Fatbin;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Family {
    Sparse,
    Optim,
}

impl Family {
    fn fatbin(self) -> &'static Fatbin {
        static FATBINS: [Fatbin; 2] = [runtime::fatbin!("sparse"), runtime::fatbin!("optim")];
        &FATBINS[self as usize]
    }
}

extern "C" {
    fn sae_sort_pairs_u32(
        temp: *mut std::ffi::c_void,
        temp_bytes: *mut usize,
        kin: *const u32,
        kout: *mut u32,
        vin: *const u32,
        vout: *mut u32,
        items: i64,
        end_bit: i32,
        stream: *mut std::ffi::c_void,
    ) -> i32;
}

fn drv(e: impl std::fmt::Debug) -> candle_core::Error {
    candle_core::Error::Msg(format!("CUDA: {e:?}"))
}

fn function(stream: &Arc<CudaStream>, family: Family, name: &str) -> Result<CudaFunction> {
    Ok(family.fatbin().function(stream.context(), name)?)
}

/// Launches `name` on `dev`'s stream; the arguments are variables (pointers as u64, sizes as i64).
macro_rules! launch {
    ($dev:expr, $fam:expr, $name:expr, ($gx:expr, $gy:expr), $block:expr; $($arg:ident),*) => {
        launch!($dev, $fam, $name, ($gx, $gy), $block, 0; $($arg),*)
    };
    ($dev:expr, $fam:expr, $name:expr, ($gx:expr, $gy:expr), $block:expr, $shared:expr; $($arg:ident),*) => {{
        let stream = $dev.cuda_stream();
        let f = function(&stream, $fam, $name)?;
        let mut b = stream.launch_builder(&f);
        $( b.arg(&$arg); )*
        let cfg = LaunchConfig {
            grid_dim: ($gx as u32, $gy as u32, 1),
            block_dim: ($block as u32, 1, 1),
            shared_mem_bytes: $shared as u32,
        };
        // SAFETY: the arguments match the kernel's parameters (sizes i64, pointers to live device
        // memory of the documented lengths, kept alive by the caller until the stream reaches the launch).
        unsafe { b.launch(cfg) }.map_err(drv)?;
    }};
}

/// Device address of a contiguous storage's first element.
pub(crate) fn storage_ptr<T: CudaDType + DeviceRepr>(
    s: &CudaStorage,
    l: &Layout,
    what: &str,
) -> Result<u64> {
    let Some((start, _)) = l.contiguous_offsets() else {
        bail!("{what} must be contiguous")
    };
    let stream = s.device.cuda_stream();
    let base = s.as_cuda_slice::<T>()?.device_ptr(&stream).0;
    Ok(base + (start * std::mem::size_of::<T>()) as u64)
}

/// Device address of a contiguous CUDA tensor's first element, with its device.
pub(crate) fn tensor_ptr(t: &Tensor) -> Result<(u64, CudaDevice)> {
    use candle_core::cuda::CudaStorageSlice as S;
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cuda(cs) = &*storage else {
        bail!("expected a CUDA tensor")
    };
    let Some((start, _)) = layout.contiguous_offsets() else {
        bail!("expected a contiguous tensor")
    };
    let stream = cs.device.cuda_stream();
    let (base, elem) = match &cs.slice {
        S::F32(s) => (s.device_ptr(&stream).0, 4),
        S::BF16(s) => (s.device_ptr(&stream).0, 2),
        S::I64(s) => (s.device_ptr(&stream).0, 8),
        S::U8(s) => (s.device_ptr(&stream).0, 1),
        S::U32(s) => (s.device_ptr(&stream).0, 4),
        _ => bail!("unexpected dtype {:?}", t.dtype()),
    };
    Ok((base + (start * elem) as u64, cs.device.clone()))
}

/// A fresh f32 output of `len` elements and its address.
fn output(dev: &CudaDevice, len: usize) -> Result<(CudaStorage, u64)> {
    // SAFETY: every kernel that gets this buffer writes all of it.
    let slice = unsafe { dev.alloc::<f32>(len.max(1))? };
    let p = slice.device_ptr(&dev.cuda_stream()).0;
    Ok((CudaStorage::wrap_cuda_slice(slice, dev.clone()), p))
}

fn threads_for(d: usize) -> usize {
    d.next_multiple_of(32).clamp(32, 256)
}

const MAX_GRID: usize = 65535 * 16;

/// `out [rows, d]`: out[b] = Σ over the pairs of row b of vals[s]·w[col(s)]; idx ascending.
pub(crate) fn decode_rows(
    dev: &CudaDevice,
    (vals, idx, w): (u64, u64, u64),
    pairs: usize,
    rows: usize,
    n: usize,
    d: usize,
) -> Result<CudaStorage> {
    let (out, o) = output(dev, rows * d)?;
    let (pairs, rows_i, n, d_i) = (pairs as i64, rows as i64, n as i64, d as i64);
    launch!(dev, Family::Sparse, "sae_decode_rows", (rows.clamp(1, MAX_GRID), 1), threads_for(d);
        vals, idx, w, o, pairs, rows_i, n, d_i);
    Ok(out)
}

/// Matryoshka's residuals of every prefix, `errors [groups · rows, d]` (group-major: row g·rows + b is
/// x[b] minus the reconstruction of row b by the prefix ending at `ends[g]`), and the pairs' flat indices
/// rebased on that layout (i64 [pairs]); `x [rows, d]`, `vals [pairs]`, `idx [pairs]` (i64, ascending),
/// `w [n, d]`, `b_dec [d]`, `ends` (i64 [groups], ascending, the last n), all contiguous.
pub fn prefix_errors(
    x: &Tensor,
    (vals, idx): (&Tensor, &Tensor),
    (w, b_dec): (&Tensor, &Tensor),
    ends: &Tensor,
) -> Result<(Tensor, Tensor)> {
    let (rows, d) = x.dims2()?;
    let (n, _) = w.dims2()?;
    let groups = ends.dims1()?;
    let pairs = idx.elem_count();
    if pairs == 0 || rows * d == 0 || groups == 0 {
        bail!("prefix_errors: {pairs} pairs, {rows} rows of {d}, {groups} groups: none may be 0");
    }
    // SAFETY: the kernel writes every residual and every rebased index.
    let errors = unsafe { Tensor::empty((groups * rows, d), DType::F32, x.device())? };
    let rebased = unsafe { Tensor::empty(pairs, DType::I64, x.device())? };
    let (xp, dev) = tensor_ptr(x)?;
    let (vp, ip, wp, bp) = (
        tensor_ptr(vals)?.0,
        tensor_ptr(idx)?.0,
        tensor_ptr(w)?.0,
        tensor_ptr(b_dec)?.0,
    );
    let (ep, op, rp) = (
        tensor_ptr(ends)?.0,
        tensor_ptr(&errors)?.0,
        tensor_ptr(&rebased)?.0,
    );
    let (pairs_i, rows_i, n_i, d_i, groups_i) =
        (pairs as i64, rows as i64, n as i64, d as i64, groups as i64);
    launch!(dev, Family::Sparse, "sae_prefix_errors", (rows.clamp(1, MAX_GRID), 1), threads_for(d);
        xp, vp, ip, wp, bp, ep, op, rp, pairs_i, rows_i, n_i, d_i, groups_i);
    Ok((errors, rebased))
}

/// The gradient reaching each group's pairs from the prefix residuals `errors [groups · rows, d]`:
/// `u[g] = Σ_{h ≥ g} −2·coefs[h]·grad·errors[h]` (coefs f32 [groups], grad the f32 scalar upstream
/// gradient, read on the device), same shape.
pub fn prefix_upstream(errors: &Tensor, coefs: &Tensor, grad: &Tensor) -> Result<Tensor> {
    let groups = coefs.dims1()?;
    let total = errors.elem_count();
    if groups == 0 || total == 0 || !total.is_multiple_of(groups) || grad.elem_count() != 1 {
        bail!("prefix_upstream: {total} residuals over {groups} groups, a scalar gradient");
    }
    // SAFETY: the kernel writes every element.
    let u = unsafe { Tensor::empty(errors.shape(), DType::F32, errors.device())? };
    let (ep, dev) = tensor_ptr(errors)?;
    let (cp, gp, up) = (tensor_ptr(coefs)?.0, tensor_ptr(grad)?.0, tensor_ptr(&u)?.0);
    let len = total / groups;
    let (len_i, groups_i) = (len as i64, groups as i64);
    launch!(dev, Family::Sparse, "sae_prefix_upstream", (len.div_ceil(256).clamp(1, MAX_GRID), 1), 256;
        ep, cp, gp, up, len_i, groups_i);
    Ok(u)
}

/// `out [pairs]`: out[s] = g[row(s)]·w[col(s)] (+ bias[col(s)] where `bias` ≠ 0).
pub(crate) fn dot_pairs(
    dev: &CudaDevice,
    (g, idx, w, bias): (u64, u64, u64, u64),
    pairs: usize,
    n: usize,
    d: usize,
) -> Result<CudaStorage> {
    let (out, o) = output(dev, pairs)?;
    let blocks = pairs.div_ceil(8).clamp(1, MAX_GRID);
    let (pairs, n, d) = (pairs as i64, n as i64, d as i64);
    launch!(dev, Family::Sparse, "sae_dot_pairs", (blocks, 1), 256; g, idx, w, bias, o, pairs, n, d);
    Ok(out)
}

/// `out [n, d]`: out[j] = Σ over the pairs of latent j, in pair order, of vals[s]·g[row(s)].
pub(crate) fn col_reduce(
    dev: &CudaDevice,
    ptrs: (u64, u64, u64),
    pairs: usize,
    n: usize,
    d: usize,
) -> Result<CudaStorage> {
    let (out, o) = output(dev, n * d)?;
    col_reduce_raw(dev, ptrs, pairs, (n, d), (o, 0))?;
    Ok(out)
}

/// In place: `acc [n, d]` += the [`col_reduce`] of `rows [B, d]`, `idx [S]`, `vals [S]`.
pub fn col_reduce_into(acc: &Tensor, rows: &Tensor, idx: &Tensor, vals: &Tensor) -> Result<()> {
    let (n, d) = acc.dims2()?;
    let (o, dev) = tensor_ptr(acc)?;
    let ptrs = (tensor_ptr(rows)?.0, tensor_ptr(idx)?.0, tensor_ptr(vals)?.0);
    col_reduce_raw(&dev, ptrs, idx.elem_count(), (n, d), (o, 1))
}

fn col_reduce_raw(
    dev: &CudaDevice,
    (g, idx, vals): (u64, u64, u64),
    pairs: usize,
    (n, d): (usize, usize),
    (o, accumulate): (u64, i32),
) -> Result<()> {
    let stream = dev.cuda_stream();
    let len = pairs.max(1);
    // SAFETY: written by sae_pair_keys and the sort before they are read.
    let (kin, vin, kout, vout) = unsafe {
        (
            dev.alloc::<u32>(len)?,
            dev.alloc::<u32>(len)?,
            dev.alloc::<u32>(len)?,
            dev.alloc::<u32>(len)?,
        )
    };
    let p = |s: &candle_core::cuda::cudarc::driver::CudaSlice<u32>| s.device_ptr(&stream).0;
    let (kin_p, vin_p, kout_p, vout_p) = (p(&kin), p(&vin), p(&kout), p(&vout));
    let (pairs_i, n_i, d_i) = (pairs as i64, n as i64, d as i64);
    if pairs > 0 {
        launch!(dev, Family::Sparse, "sae_pair_keys", (pairs.div_ceil(256).clamp(1, MAX_GRID), 1), 256;
            idx, kin_p, vin_p, pairs_i, n_i);
        let end_bit = (usize::BITS - n.saturating_sub(1).leading_zeros()).max(1) as i32;
        let mut temp_bytes = 0usize;
        let cu = stream.cu_stream() as *mut std::ffi::c_void;
        // CUB's two-phase call: a null scratch pointer asks for the scratch size, then the sort runs.
        // SAFETY: all buffers hold `pairs` elements; they are freed stream-ordered (cuMemFreeAsync), so
        // they outlive the queued sort and reduce; with a null scratch pointer CUB reads no device memory.
        let sort = |temp: *mut std::ffi::c_void, bytes: &mut usize| unsafe {
            sae_sort_pairs_u32(
                temp,
                bytes,
                kin_p as *const u32,
                kout_p as *mut u32,
                vin_p as *const u32,
                vout_p as *mut u32,
                pairs_i,
                end_bit,
                cu,
            )
        };
        let e = sort(std::ptr::null_mut(), &mut temp_bytes);
        if e != 0 {
            bail!("CUB sort size query failed ({e})")
        }
        // SAFETY: CUB's scratch space, written before it is read.
        let temp = unsafe { dev.alloc::<u8>(temp_bytes.max(1))? };
        let temp_p = temp.device_ptr(&stream).0;
        let e = sort(temp_p as *mut std::ffi::c_void, &mut temp_bytes);
        if e != 0 {
            bail!("CUB sort failed ({e})")
        }
        drop(temp);
    }
    // SAFETY: sae_latent_offsets writes all n + 1 entries before the reduction reads them.
    let offsets = unsafe { dev.alloc::<i64>(n + 1)? };
    let offsets_p = offsets.device_ptr(&stream).0;
    launch!(dev, Family::Sparse, "sae_latent_offsets", ((n + 1).div_ceil(256).clamp(1, MAX_GRID), 1), 256;
        kout_p, offsets_p, pairs_i, n_i);
    launch!(dev, Family::Sparse, "sae_col_reduce", (n.clamp(1, MAX_GRID), 1), threads_for(d);
        g, idx, vals, offsets_p, vout_p, o, n_i, n_i, d_i, accumulate);
    drop((kin, vin, kout, vout, offsets));
    Ok(())
}

/// [n] f32: 1 where some pair of that latent has a positive value.
pub fn fired(idx: &Tensor, vals: &Tensor, n: usize) -> Result<Tensor> {
    let out = Tensor::zeros(n, DType::F32, idx.device())?;
    let pairs = idx.elem_count();
    if pairs == 0 {
        return Ok(out);
    }
    let (idx_p, dev) = tensor_ptr(idx)?;
    let (vals_p, _) = tensor_ptr(vals)?;
    let (out_p, _) = tensor_ptr(&out)?;
    let (pairs_i, n_i) = (pairs as i64, n as i64);
    launch!(dev, Family::Sparse, "sae_mark_fired", (pairs.div_ceil(256).clamp(1, MAX_GRID), 1), 256;
        idx_p, vals_p, out_p, pairs_i, n_i);
    Ok(out)
}

fn suffix(t: &Tensor) -> Result<&'static str> {
    match t.dtype() {
        DType::F32 => Ok("f32"),
        DType::BF16 => Ok("bf16"),
        other => bail!("scores must be f32 or bf16, not {other:?}"),
    }
}

/// In place over `pre [rows, n]` (a fresh, contiguous tensor): pre = max(pre + bias, 0).
pub fn bias_relu_inplace(pre: &Tensor, bias: &Tensor) -> Result<()> {
    per_column_inplace("sae_bias_relu", pre, bias)
}

/// The kernel `{kernel}_{dtype}` over `t [rows, n]` in place, with `columns [n]` holding a value per
/// column: one thread an element.
fn per_column_inplace(kernel: &str, t: &Tensor, columns: &Tensor) -> Result<()> {
    let (rows, n) = t.dims2()?;
    let name = format!("{kernel}_{}", suffix(t)?);
    let (p, dev) = tensor_ptr(t)?;
    let (c, _) = tensor_ptr(columns)?;
    let (rows_i, n_i) = (rows as i64, n as i64);
    launch!(dev, Family::Sparse, &name, (n.div_ceil(256), rows.clamp(1, 65535)), 256; p, c, rows_i, n_i);
    Ok(())
}

/// The positions (u32 [width], ascending) of the nonzero bytes of `mask` (u8 [n], contiguous), padded
/// with the first: one block compacts the mask on the device. `width` is at least the number of
/// nonzero bytes, which must not be 0; later ones would be dropped.
pub fn dead_columns(mask: &Tensor, width: usize) -> Result<Tensor> {
    let n = mask.dims1()?;
    if width == 0 || mask.dtype() != DType::U8 {
        bail!("dead_columns: a u8 mask and a width > 0");
    }
    // SAFETY: the kernel writes every position (the padding after the compacted ones).
    let cols = unsafe { Tensor::empty(width, DType::U32, mask.device())? };
    let (m, dev) = tensor_ptr(mask)?;
    let (c, _) = tensor_ptr(&cols)?;
    let (n_i, width_i) = (n as i64, width as i64);
    launch!(dev, Family::Sparse, "sae_dead_columns", (1, 1), DEAD_COLUMNS_THREADS; m, c, n_i, width_i);
    Ok(cols)
}

/// `DEAD_COLUMNS_THREADS` of `kernels/sparse.cu`.
const DEAD_COLUMNS_THREADS: usize = 1024;

/// `t [rows, cols]` (contiguous, f32 or bf16) transposed into a fresh contiguous `[cols, rows]`.
pub fn transpose(t: &Tensor) -> Result<Tensor> {
    let (rows, cols) = t.dims2()?;
    // SAFETY: the kernel writes every element.
    let out = unsafe { Tensor::empty((cols, rows), t.dtype(), t.device())? };
    if rows * cols == 0 {
        return Ok(out);
    }
    let name = format!("sae_transpose_{}", suffix(t)?);
    let (ip, dev) = tensor_ptr(t)?;
    let (op, _) = tensor_ptr(&out)?;
    let (rows_i, cols_i) = (rows as i64, cols as i64);
    launch!(dev, Family::Sparse, &name, (cols.div_ceil(32), rows.div_ceil(32).clamp(1, 65535)), 256;
        ip, op, rows_i, cols_i);
    Ok(out)
}

/// The rows `rows` (u32) of `w [n, d]` (contiguous f32), in `dtype` (f32 or bf16): `[rows.len(), d]`.
pub fn gather_rows(w: &Tensor, rows: &Tensor, dtype: DType) -> Result<Tensor> {
    let (_, d) = w.dims2()?;
    let count = rows.dims1()?;
    if w.dtype() != DType::F32 || rows.dtype() != DType::U32 {
        bail!("gather_rows: f32 rows and u32 positions");
    }
    // SAFETY: the kernel writes every element.
    let out = unsafe { Tensor::empty((count, d), dtype, w.device())? };
    if count * d == 0 {
        return Ok(out);
    }
    let name = format!("sae_gather_rows_{}", suffix(&out)?);
    let (wp, dev) = tensor_ptr(w)?;
    let (rp, op) = (tensor_ptr(rows)?.0, tensor_ptr(&out)?.0);
    let (count_i, d_i) = (count as i64, d as i64);
    launch!(dev, Family::Sparse, &name, (count.clamp(1, MAX_GRID), 1), threads_for(d);
        wp, rp, op, count_i, d_i);
    Ok(out)
}

/// In place over `scores [rows, n]`: the columns where `dead` (u8 [n]) is 0 become -1.
pub fn mask_live_inplace(scores: &Tensor, dead: &Tensor) -> Result<()> {
    per_column_inplace("sae_mask_live", scores, dead)
}

/// `out [rows, cols]` (zeroed, the dtype of `src`) takes `src`'s elements at the columns `idx [rows, keep]`
/// (i64) of each row.
pub fn scatter_rows(src: &Tensor, idx: &Tensor, out: &Tensor) -> Result<()> {
    let pairs = idx.elem_count();
    if pairs == 0 {
        return Ok(());
    }
    let (_, keep) = idx.dims2()?;
    let (_, cols) = src.dims2()?;
    let name = format!("sae_scatter_rows_{}", suffix(src)?);
    let (s, dev) = tensor_ptr(src)?;
    let (i, _) = tensor_ptr(idx)?;
    let (o, _) = tensor_ptr(out)?;
    let (pairs_i, keep_i, cols_i) = (pairs as i64, keep as i64, cols as i64);
    launch!(dev, Family::Sparse, &name, (pairs.div_ceil(256).clamp(1, MAX_GRID), 1), 256;
        s, i, o, pairs_i, keep_i, cols_i);
    Ok(())
}

/// Widest row of dead columns that [`aux_topk_rows`] takes (`AUX_ROW_MAX` in `kernels/sparse.cu`: the
/// row is selected in shared memory).
pub const AUX_ROW_MAX: usize = 11264;

/// The aux-k activations `[rows, width]` (the dtype of `scores`) in one kernel: row b holds
/// `scores[b, cols[j]]` (`cols` u32 [width], the first `real` of them read, the rest padding that reads 0;
/// None: column j) where it is among the row's `keep` largest (ties to the lowest position), 0 elsewhere.
/// Requires `1 ≤ keep < width ≤ AUX_ROW_MAX`.
pub fn aux_topk_rows(
    scores: &Tensor,
    cols: Option<&Tensor>,
    real: usize,
    width: usize,
    keep: usize,
) -> Result<Tensor> {
    let (rows, n) = scores.dims2()?;
    if keep == 0 || keep >= width || width > AUX_ROW_MAX || real > width.min(n) {
        bail!("aux_topk_rows: keep {keep}, width {width}, real {real}, n {n} out of range");
    }
    if let Some(c) = cols {
        if c.dims1()? != width || c.dtype() != DType::U32 {
            bail!("aux_topk_rows: cols must be u32 [{width}]");
        }
    }
    let name = format!("sae_aux_topk_rows_{}", suffix(scores)?);
    // SAFETY: the kernel writes every element of every row.
    let out = unsafe { Tensor::empty((rows, width), scores.dtype(), scores.device())? };
    if rows == 0 {
        return Ok(out);
    }
    let scores = scores.contiguous()?;
    let (s, dev) = tensor_ptr(&scores)?;
    let cols = cols.map(Tensor::contiguous).transpose()?;
    let c = match &cols {
        Some(c) => tensor_ptr(c)?.0,
        None => 0u64,
    };
    let (o, _) = tensor_ptr(&out)?;
    let (rows_i, n_i, real_i, width_i, keep_i) = (
        rows as i64,
        n as i64,
        real as i64,
        width as i64,
        keep as i64,
    );
    // The row in dynamic shared memory, as f32 whatever the scores' dtype.
    let shared = width * std::mem::size_of::<f32>();
    launch!(dev, Family::Sparse, &name, (rows.clamp(1, MAX_GRID), 1), 256, shared;
        s, c, o, rows_i, n_i, real_i, width_i, keep_i);
    Ok(out)
}

/// In place over `x [rows, cols]` (contiguous, f32 or bf16): the columns from `from` on become 0.
pub fn zero_tail_columns_inplace(x: &Tensor, from: usize) -> Result<()> {
    let (rows, cols) = x.dims2()?;
    let len = rows * cols.saturating_sub(from);
    if len == 0 {
        return Ok(());
    }
    let name = format!("sae_zero_tail_{}", suffix(x)?);
    let (xp, dev) = tensor_ptr(x)?;
    let (rows_i, cols_i, from_i) = (rows as i64, cols as i64, from as i64);
    launch!(dev, Family::Sparse, &name, (len.div_ceil(256).clamp(1, MAX_GRID), 1), 256;
        xp, rows_i, cols_i, from_i);
    Ok(())
}

/// In place: `y = e − y` (both contiguous f32 of the same size).
pub fn sub_from_inplace(y: &Tensor, e: &Tensor) -> Result<()> {
    let len = y.elem_count();
    if len == 0 {
        return Ok(());
    }
    let (yp, dev) = tensor_ptr(y)?;
    let (ep, _) = tensor_ptr(e)?;
    let len_i = len as i64;
    launch!(dev, Family::Sparse, "sae_sub_from", (len.div_ceil(256).clamp(1, MAX_GRID), 1), 256; yp, ep, len_i);
    Ok(())
}

/// `s · src` (contiguous f32), times the f32 scalar `by` when given (read on the device: no wait), as a
/// fresh tensor of `dtype` (f32 or bf16).
pub fn scale_to(src: &Tensor, s: f32, by: Option<&Tensor>, dtype: DType) -> Result<Tensor> {
    let len = src.elem_count();
    if len == 0 {
        return Tensor::zeros(src.shape(), dtype, src.device());
    }
    // SAFETY: the kernel writes every element.
    let out = unsafe { Tensor::empty(src.shape(), dtype, src.device())? };
    let name = format!("sae_scale_to_{}", suffix(&out)?);
    let (sp, dev) = tensor_ptr(src)?;
    let (op, _) = tensor_ptr(&out)?;
    let bp = match by {
        Some(b) if b.elem_count() == 1 && b.dtype() == DType::F32 => tensor_ptr(b)?.0,
        Some(_) => bail!("scale_to: `by` must be one f32"),
        None => 0u64,
    };
    let len_i = len as i64;
    launch!(dev, Family::Sparse, &name, (len.div_ceil(256).clamp(1, MAX_GRID), 1), 256; sp, op, s, bp, len_i);
    Ok(out)
}

/// In place: `g [rows, width]` is zeroed wherever `a` (same shape and dtype, contiguous) is not
/// positive; returns the column sums of the masked `g` (f32 [width]), reduced in a fixed order.
pub fn mask_colsum_inplace(g: &Tensor, a: &Tensor) -> Result<Tensor> {
    let (rows, width) = g.dims2()?;
    if a.dims2()? != (rows, width) || a.dtype() != g.dtype() {
        bail!("mask_colsum: g and a must have the same shape and dtype");
    }
    let sums = Tensor::zeros(width, DType::F32, g.device())?;
    if rows * width == 0 {
        return Ok(sums);
    }
    let chunks = rows.min(64);
    let chunk = rows.div_ceil(chunks);
    let chunks = rows.div_ceil(chunk);
    // SAFETY: every (chunk, column) partial is written by the kernel.
    let partial = unsafe { Tensor::empty(chunks * width, DType::F32, g.device())? };
    let name = format!("sae_mask_colsum_{}", suffix(g)?);
    let (gp, dev) = tensor_ptr(g)?;
    let (ap, pp, sp) = (
        tensor_ptr(a)?.0,
        tensor_ptr(&partial)?.0,
        tensor_ptr(&sums)?.0,
    );
    let (rows_i, width_i, chunk_i, chunks_i, one) =
        (rows as i64, width as i64, chunk as i64, chunks as i64, 1i64);
    launch!(dev, Family::Sparse, &name, (width.div_ceil(256), chunks), 256;
        gp, ap, pp, rows_i, width_i, chunk_i);
    // The chunks' partials summed in chunk order (a mean over one row is the sum).
    launch!(dev, Family::Optim, "sae_col_mean", (width.div_ceil(256), 1), 256; pp, sp, chunks_i, one, width_i);
    Ok(sums)
}

/// In place: row `rows[i]` of `acc [n, d]` (row i without `rows`) += row i of `src [count, d]`; the rows
/// are distinct.
pub fn rows_add_inplace(acc: &Tensor, rows: Option<&Tensor>, src: &Tensor) -> Result<()> {
    let (count, d) = src.dims2()?;
    if count * d == 0 {
        return Ok(());
    }
    let (a, dev) = tensor_ptr(acc)?;
    let r = match rows {
        Some(r) => tensor_ptr(r)?.0,
        None => 0u64,
    };
    let (s, _) = tensor_ptr(src)?;
    let (count_i, d_i) = (count as i64, d as i64);
    launch!(dev, Family::Sparse, "sae_rows_add", ((count * d).div_ceil(256).clamp(1, MAX_GRID), 1), 256;
        a, r, s, count_i, d_i);
    Ok(())
}

const SUMSQ_BLOCKS: usize = 1024;

/// Σ x² of a contiguous f32 tensor as an f32 scalar on the device (no wait for it), reduced in a fixed
/// order: block partials over a fixed grid, then their sum in block order.
pub fn sum_sq_scalar(x: &Tensor) -> Result<Tensor> {
    // SAFETY: every block writes its partial.
    let partial = unsafe { Tensor::empty(SUMSQ_BLOCKS, DType::F32, x.device())? };
    // SAFETY: written by the one thread of sae_col_mean's first block.
    let total = unsafe { Tensor::empty((), DType::F32, x.device())? };
    let (xp, dev) = tensor_ptr(x)?;
    let (pp, tp) = (tensor_ptr(&partial)?.0, tensor_ptr(&total)?.0);
    let (len, chunks, one) = (x.elem_count() as i64, SUMSQ_BLOCKS as i64, 1i64);
    launch!(dev, Family::Optim, "sae_sumsq", (SUMSQ_BLOCKS, 1), 256; xp, len, pp);
    launch!(dev, Family::Optim, "sae_col_mean", (1, 1), 32; pp, tp, chunks, one, one);
    Ok(total)
}

/// `e = x − r` (contiguous f32 [rows, d]) and the mean over the rows of ‖e_row − column mean of e‖², by
/// reductions in a fixed order (bit-reproducible); NaN without rows.
pub fn residual_spread(x: &Tensor, r: &Tensor) -> Result<(Tensor, f64)> {
    let (rows, d) = x.dims2()?;
    let e = Tensor::zeros((rows, d), DType::F32, x.device())?;
    if rows * d == 0 {
        return Ok((e, f64::NAN));
    }
    let chunks = rows.min(64);
    let chunk = rows.div_ceil(chunks);
    let partial = Tensor::zeros(chunks * d, DType::F32, x.device())?;
    let mean = Tensor::zeros(d, DType::F32, x.device())?;
    let sums = Tensor::zeros(SUMSQ_BLOCKS, DType::F32, x.device())?;
    let (xp, dev) = tensor_ptr(x)?;
    let (rp, ep, pp) = (tensor_ptr(r)?.0, tensor_ptr(&e)?.0, tensor_ptr(&partial)?.0);
    let (mp, sp) = (tensor_ptr(&mean)?.0, tensor_ptr(&sums)?.0);
    let (rows_i, d_i, chunk_i, chunks_i, len_i) = (
        rows as i64,
        d as i64,
        chunk as i64,
        chunks as i64,
        (rows * d) as i64,
    );
    launch!(dev, Family::Optim, "sae_residual_cols", (d.div_ceil(256), chunks), 256;
        xp, rp, ep, pp, rows_i, d_i, chunk_i);
    launch!(dev, Family::Optim, "sae_col_mean", (d.div_ceil(256), 1), 256; pp, mp, chunks_i, rows_i, d_i);
    launch!(dev, Family::Optim, "sae_centered_sumsq", (SUMSQ_BLOCKS, 1), 256; ep, mp, len_i, d_i, sp);
    let total: f64 = sums.to_vec1::<f32>()?.iter().map(|&v| v as f64).sum();
    Ok((e, total / rows as f64))
}

/// `ADAM_MAX_PARAMS` and `ADAM_CHUNK` of `kernels/optim.cu`.
const ADAM_MAX_PARAMS: usize = 4;
const ADAM_CHUNK: usize = 2048;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct AdamParam {
    p: u64,
    g: u64,
    m: u64,
    v: u64,
    len: i64,
    d: i64,
    first_block: i64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct AdamTable {
    t: [AdamParam; ADAM_MAX_PARAMS],
    count: i64,
    blocks: i64,
    dots: u64,
    partial: u64,
    scale: f32,
    beta1: f32,
    beta2: f32,
    bc1: f32,
    bc2: f32,
    eps: f32,
    lr: f32,
}
// SAFETY: plain old data mirroring `struct AdamTable` in kernels/optim.cu.
unsafe impl DeviceRepr for AdamTable {}

/// Adam's constants for one step (bias corrections `1 − β^t` included).
pub struct AdamStep {
    pub beta1: f64,
    pub beta2: f64,
    pub bc1: f64,
    pub bc2: f64,
    pub eps: f64,
    pub lr: f64,
}

/// The whole optimizer step in place over up to four parameters `[p, g, m, v]` (p and g f32, the
/// moments f32 or bf16, all contiguous and of one size per parameter): parameter `decoder` ([rows, d])
/// has its gradient projected off each of its rows and its rows renormalized after the update; every
/// gradient is scaled by `min(1, clip / ‖g‖)` (clip 0: no clipping), ‖g‖ the global norm after the
/// projection, which is returned. Two launches over all parameters (the gradients' statistics, then
/// Adam), one wait for the norm between them.
pub fn adam_fused(params: &[[&Tensor; 4]], decoder: usize, clip: f64, h: &AdamStep) -> Result<f64> {
    if params.is_empty() || params.len() > ADAM_MAX_PARAMS || decoder >= params.len() {
        bail!(
            "adam_fused: 1 to {ADAM_MAX_PARAMS} parameters with the decoder among them, not {}",
            params.len()
        );
    }
    let moments = params[0][2].dtype();
    let kernel = match moments {
        DType::F32 => "sae_adam_multi_f32",
        DType::BF16 => "sae_adam_multi_bf16",
        other => bail!("adam_fused: moments must be f32 or bf16, not {other:?}"),
    };
    let dev = tensor_ptr(params[0][0])?.1;
    let mut table = AdamTable {
        t: [AdamParam::default(); ADAM_MAX_PARAMS],
        count: params.len() as i64,
        blocks: 0,
        dots: 0,
        partial: 0,
        scale: 1.0,
        beta1: h.beta1 as f32,
        beta2: h.beta2 as f32,
        bc1: h.bc1 as f32,
        bc2: h.bc2 as f32,
        eps: h.eps as f32,
        lr: h.lr as f32,
    };
    let mut blocks = 0usize;
    let mut rows = 0usize;
    for (i, [p, g, m, v]) in params.iter().enumerate() {
        let len = p.elem_count();
        if [g, m, v].iter().any(|t| t.elem_count() != len)
            || p.dtype() != DType::F32
            || g.dtype() != DType::F32
            || m.dtype() != moments
            || v.dtype() != moments
        {
            bail!(
                "adam_fused: parameter {i}: p, g f32 and m, v {moments:?}, all of {len} elements"
            );
        }
        let d = if i == decoder {
            let (r, d) = p.dims2()?;
            rows = r;
            d
        } else {
            0
        };
        table.t[i] = AdamParam {
            p: tensor_ptr(p)?.0,
            g: tensor_ptr(g)?.0,
            m: tensor_ptr(m)?.0,
            v: tensor_ptr(v)?.0,
            len: len as i64,
            d: d as i64,
            first_block: blocks as i64,
        };
        blocks += if d > 0 {
            rows
        } else {
            len.div_ceil(ADAM_CHUNK)
        };
    }
    if blocks == 0 {
        return Ok(0.0);
    }
    if blocks > i32::MAX as usize {
        bail!("adam_fused: {blocks} blocks exceed the grid");
    }
    // SAFETY: the stats pass writes every row's dot and every block's partial before they are read.
    let dots = unsafe { Tensor::empty(rows.max(1), DType::F32, params[0][0].device())? };
    let partial = unsafe { Tensor::empty(blocks, DType::F32, params[0][0].device())? };
    let total = unsafe { Tensor::empty((), DType::F64, params[0][0].device())? };
    table.blocks = blocks as i64;
    table.dots = tensor_ptr(&dots)?.0;
    table.partial = tensor_ptr(&partial)?.0;
    let (pp, tp, count) = (table.partial, tensor_ptr(&total)?.0, blocks as i64);
    launch!(dev, Family::Optim, "sae_adam_stats", (blocks, 1), 256; table);
    launch!(dev, Family::Optim, "sae_sum_partials", (1, 1), 1024; pp, count, tp);
    let norm = total.to_scalar::<f64>()?.sqrt();
    table.scale = if clip > 0.0 && norm > clip {
        (clip / norm) as f32
    } else {
        1.0
    };
    launch!(dev, Family::Optim, kernel, (blocks, 1), 256; table);
    Ok(norm)
}

/// One cuBLASLt handle (with its workspace) per stream, made on first use; a handle keeps its stream
/// alive, so a stream's address is never reused while it is cached.
fn blas_lt(stream: &Arc<CudaStream>) -> Result<Arc<CudaBlasLT>> {
    static HANDLES: OnceLock<Mutex<HashMap<usize, Arc<CudaBlasLT>>>> = OnceLock::new();
    let mut handles = HANDLES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let key = stream.cu_stream() as usize;
    if let Some(h) = handles.get(&key) {
        return Ok(h.clone());
    }
    let h = Arc::new(CudaBlasLT::new(stream.clone()).map_err(drv)?);
    handles.insert(key, h.clone());
    Ok(h)
}

/// The contiguous f32 elements of a CUDA storage under `l`.
fn view<'a>(s: &'a CudaStorage, l: &Layout, what: &str) -> Result<CudaView<'a, f32>> {
    let Some((start, end)) = l.contiguous_offsets() else {
        bail!("{what} must be contiguous")
    };
    Ok(s.as_cuda_slice::<f32>()?.slice(start..end))
}

/// `relu(xc · wᵀ + b)` [rows, n] from `xc [rows, d]`, `w [n, d]`, `b [n]` (f32, contiguous): one
/// cuBLASLt matmul on TF32 tensor cores with its bias + ReLU epilogue, so the scores are written once
/// and never read back for the bias and the ReLU.
pub(crate) fn scores_tf32(
    (x, xl): (&CudaStorage, &Layout),
    (w, wl): (&CudaStorage, &Layout),
    (b, bl): (&CudaStorage, &Layout),
) -> Result<(CudaStorage, candle_core::Shape)> {
    let (rows, d) = xl.shape().dims2()?;
    let (n, dw) = wl.shape().dims2()?;
    if dw != d || bl.shape().dims1()? != n {
        bail!(
            "scores: inputs [{rows}, {d}], W [{n}, {dw}], bias {:?}",
            bl.dims()
        );
    }
    let dev = &x.device;
    // SAFETY: the matmul writes every element (beta = 0).
    let mut out = unsafe { dev.alloc::<f32>((rows * n).max(1))? };
    if rows * n > 0 {
        // Column-major: out [n, rows] = op(W) [n, d] · xc [d, rows], W read transposed; the bias runs
        // along the n rows of the column-major result, i.e. per latent.
        let cfg = MatmulConfig {
            transa: true,
            transb: false,
            transc: false,
            m: n as u64,
            n: rows as u64,
            k: d as u64,
            alpha: 1.0,
            lda: d as i64,
            ldb: d as i64,
            beta: 0.0,
            ldc: n as i64,
            stride_a: None,
            stride_b: None,
            stride_c: None,
            stride_bias: None,
            batch_size: None,
        };
        let (wv, xv, bv) = (
            view(w, wl, "W")?,
            view(x, xl, "inputs")?,
            view(b, bl, "bias")?,
        );
        let lt = blas_lt(&dev.cuda_stream())?;
        // SAFETY: the views hold the sizes the config states; `out` holds rows · n elements.
        unsafe { lt.matmul(cfg, &wv, &xv, &mut out, Some(&bv), Some(&Activation::Relu)) }
            .map_err(drv)?;
    }
    Ok((
        CudaStorage::wrap_cuda_slice(out, dev.clone()),
        candle_core::Shape::from((rows, n)),
    ))
}
