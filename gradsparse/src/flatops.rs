//! In-place scatters into flat f32 buffers (the CPU apply; the residual update itself is
//! `profk::accumulate`, and the CUDA apply is one fused launch in `crate::cuda`).
use crate::error::Result;
use candle_core::Tensor;

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
