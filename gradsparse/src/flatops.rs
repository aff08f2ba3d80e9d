//! In-place updates of flat f32 buffers through candle's public ops, so nothing full-sized is copied.
//!
//! `add_into` uses a scatter-add along a unit dimension: candle then runs one element per thread on
//! CUDA and touches the destination in place (read grad + read/write destination, plus one u8 index
//! per element), instead of allocating `residual + grad` and copying it back.
use crate::error::Result;
use candle_core::{DType, Device, Tensor};

/// Scratch kept by a flat buffer's owner: a zero u8 index column as long as the largest parameter.
#[derive(Clone, Debug)]
pub struct Scratch {
    zero_ids: Tensor,
}

impl Scratch {
    pub fn new(max_len: usize, device: &Device) -> Result<Self> {
        Ok(Self {
            zero_ids: Tensor::zeros((max_len.max(1), 1), DType::U8, device)?,
        })
    }

    /// `flat[offset .. offset + src.len] += src` in place.
    pub fn add_into(&self, flat: &Tensor, offset: usize, src: &Tensor) -> Result<()> {
        let n = src.elem_count();
        if n == 0 {
            return Ok(());
        }
        let dst = flat.narrow(0, offset, n)?.reshape((n, 1))?;
        let src = src.to_dtype(flat.dtype())?.reshape((n, 1))?.contiguous()?;
        let ids = self.zero_ids.narrow(0, 0, n)?;
        dst.scatter_add_set(&ids, &src, 1)?;
        Ok(())
    }
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
