//! "Sum this tensor over the ranks": on a CUDA tensor with NCCL, on the device without a host copy
//! (on the communicator's stream, which is the model's); otherwise through the trait's host calls.

use crate::{Collective, Error, Result};
use candle_core::{DType, Tensor};

/// The element-wise sum of `t` (f32) over the ranks, of `t`'s shape, on `t`'s device. Every rank
/// passes a tensor of the same shape.
pub fn all_reduce_sum_tensor(c: &dyn Collective, t: &Tensor) -> Result<Tensor> {
    if t.dtype() != DType::F32 {
        return Err(Error::Call(format!(
            "tensor all-reduce of {:?}; only f32 is summed",
            t.dtype()
        )));
    }
    if let Some(summed) = c.all_reduce_sum_device(t) {
        return summed;
    }
    let candle = |e: candle_core::Error| Error::Call(format!("tensor all-reduce: {e}"));
    let mut host = t
        .flatten_all()
        .and_then(|f| f.to_vec1::<f32>())
        .map_err(candle)?;
    c.all_reduce_sum_f32(&mut host)?;
    Tensor::from_vec(host, t.shape(), t.device()).map_err(candle)
}

/// Bytes of a tensor's elements.
pub fn tensor_bytes(t: &Tensor) -> u64 {
    (t.elem_count() * t.dtype().size_in_bytes()) as u64
}
