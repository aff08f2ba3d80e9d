//! Gradient sinks: weights whose gradient the backward pass adds in place into a slice of a flat f32
//! buffer (error feedback's residual) instead of returning it to candle's gradient store.
//!
//! The store adds every returned gradient into a fresh zero tensor (a write, then a read of both and a
//! write), and a residual update reads it once more; with a sink, [`super::linear_train`]'s
//! weight-gradient product accumulates straight into the buffer (cuBLASLt's `beta = 1` on CUDA, one
//! rounding of `r + dW` as an update pass would do), and the weight gets no entry in the store.
//!
//! Sinks are keyed by the weight tensor's id and live as long as the [`SinkGuard`] that registered
//! them, so a guard around one `backward()` call scopes them to that call.
use candle_core::{CpuStorage, DType, Layout, Result, Tensor, TensorId};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// Where one weight's gradient goes: `buffer[offset .. offset + weight.elem_count()]`.
#[derive(Clone, Debug)]
pub struct GradSink {
    pub buffer: Tensor,
    pub offset: usize,
}

fn sinks() -> &'static Mutex<HashMap<TensorId, GradSink>> {
    static SINKS: OnceLock<Mutex<HashMap<TensorId, GradSink>>> = OnceLock::new();
    SINKS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Unregisters its weights' sinks when dropped.
#[must_use = "the sinks are removed when the guard is dropped"]
pub struct SinkGuard(Vec<TensorId>);

impl Drop for SinkGuard {
    fn drop(&mut self) {
        let mut map = sinks().lock().unwrap_or_else(|e| e.into_inner());
        for id in &self.0 {
            map.remove(id);
        }
    }
}

/// Registers a sink for each `(weight, sink)`: while the guard lives, the gradient of `weight` (an
/// f32 tensor, contiguous, in row-major order) is added into its slice of the sink's buffer (f32, one
/// contiguous vector on the weight's device) by the ops that support sinks, and not returned.
pub fn sink_gradients<'a>(
    targets: impl IntoIterator<Item = (&'a Tensor, GradSink)>,
) -> Result<SinkGuard> {
    let mut checked = Vec::new();
    for (weight, sink) in targets {
        let len = weight.elem_count();
        let buffer_len = sink.buffer.dims1().map_err(|_| {
            candle_core::Error::Msg(format!(
                "gradient sink: the buffer has shape {:?}, expected one vector",
                sink.buffer.dims()
            ))
        })?;
        if weight.dtype() != DType::F32 || sink.buffer.dtype() != DType::F32 {
            return Err(candle_core::Error::Msg(format!(
                "gradient sink: weight {:?} and buffer {:?} must both be f32",
                weight.dtype(),
                sink.buffer.dtype()
            )));
        }
        if !sink.buffer.is_contiguous() || !weight.is_contiguous() {
            return Err(candle_core::Error::Msg(
                "gradient sink: weight and buffer must be contiguous".into(),
            ));
        }
        if sink.offset + len > buffer_len {
            return Err(candle_core::Error::Msg(format!(
                "gradient sink: {len} elements from offset {} pass the buffer's end ({buffer_len})",
                sink.offset
            )));
        }
        if !weight.device().same_device(sink.buffer.device()) {
            return Err(candle_core::Error::Msg(
                "gradient sink: weight and buffer are on different devices".into(),
            ));
        }
        checked.push((weight.id(), sink));
    }
    let mut map = sinks().lock().unwrap_or_else(|e| e.into_inner());
    let ids = checked.iter().map(|(id, _)| *id).collect();
    map.extend(checked);
    Ok(SinkGuard(ids))
}

/// The sink registered for `weight`, if any.
pub(crate) fn sink_for(weight: &Tensor) -> Option<GradSink> {
    let map = sinks().lock().unwrap_or_else(|e| e.into_inner());
    map.get(&weight.id()).cloned()
}

/// Adds `grad` (same element count as the sink's weight) into the sink's slice on the CPU (CUDA ops
/// accumulate in their own kernels).
pub(crate) fn add_into(sink: &GradSink, grad: &Tensor) -> Result<()> {
    let grad = grad.flatten_all()?.to_dtype(DType::F32)?.contiguous()?;
    let slice = sink.buffer.narrow(0, sink.offset, grad.elem_count())?;
    slice.inplace_op2(&grad, &AddAssign)
}

struct AddAssign;

impl candle_core::InplaceOp2 for AddAssign {
    fn name(&self) -> &'static str {
        "grad-sink-add"
    }

    fn cpu_fwd(
        &self,
        dst: &mut CpuStorage,
        dl: &Layout,
        src: &CpuStorage,
        sl: &Layout,
    ) -> Result<()> {
        let (CpuStorage::F32(d), CpuStorage::F32(s)) = (dst, src) else {
            candle_core::bail!("gradient sink: f32 storage expected");
        };
        let (Some((d0, d1)), Some((s0, s1))) = (dl.contiguous_offsets(), sl.contiguous_offsets())
        else {
            candle_core::bail!("gradient sink: contiguous tensors expected");
        };
        d[d0..d1]
            .iter_mut()
            .zip(&s[s0..s1])
            .for_each(|(x, y)| *x += y);
        Ok(())
    }
}
