//! In-place updates of flat f32 buffers, so nothing full-sized is copied. On CUDA the residual update
//! goes through `crate::cuda` (one launch for all parameters); these are the CPU versions and the
//! small scatters both paths share.
use crate::error::Result;
use candle_core::{CpuStorage, Layout, Tensor};

/// `dst += src` in place, both contiguous f32 (a CPU op; CUDA uses the multi-tensor kernel).
struct AddAssign;

impl candle_core::InplaceOp2 for AddAssign {
    fn name(&self) -> &'static str {
        "gradsparse-add-assign"
    }

    fn cpu_fwd(
        &self,
        dst: &mut CpuStorage,
        dl: &Layout,
        src: &CpuStorage,
        sl: &Layout,
    ) -> candle_core::Result<()> {
        let (CpuStorage::F32(d), CpuStorage::F32(s)) = (dst, src) else {
            candle_core::bail!("add-assign expects f32 storage");
        };
        let (Some((d0, d1)), Some((s0, s1))) = (dl.contiguous_offsets(), sl.contiguous_offsets())
        else {
            candle_core::bail!("add-assign expects contiguous tensors");
        };
        for (x, y) in d[d0..d1].iter_mut().zip(&s[s0..s1]) {
            *x += y;
        }
        Ok(())
    }
}

/// `flat[offset .. offset + src.len] += src` in place.
pub fn add_into(flat: &Tensor, offset: usize, src: &Tensor) -> Result<()> {
    let n = src.elem_count();
    if n == 0 {
        return Ok(());
    }
    let dst = flat.narrow(0, offset, n)?;
    let src = src.to_dtype(flat.dtype())?.flatten_all()?.contiguous()?;
    dst.inplace_op2(&src, &AddAssign)?;
    Ok(())
}

/// `flat[offset .. offset + src.len] = src` in place.
pub fn copy_into(flat: &Tensor, offset: usize, src: &Tensor) -> Result<()> {
    let src = src.to_dtype(flat.dtype())?.flatten_all()?.contiguous()?;
    flat.slice_set(&src, 0, offset)?;
    Ok(())
}

/// `flat[indices[j]] = values[j]` in place (`indices` i64, `values` of the buffer's dtype).
pub fn scatter_into(flat: &Tensor, indices: &Tensor, values: &Tensor) -> Result<()> {
    if indices.elem_count() == 0 {
        return Ok(());
    }
    flat.scatter_set(indices, &values.to_dtype(flat.dtype())?.contiguous()?, 0)?;
    Ok(())
}

/// `flat[indices[j]] = 0` in place.
pub fn zero_at(flat: &Tensor, indices: &Tensor) -> Result<()> {
    let zeros = Tensor::zeros(indices.elem_count(), flat.dtype(), flat.device())?;
    scatter_into(flat, indices, &zeros)
}
