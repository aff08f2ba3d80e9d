//! Differentiable linear layer with its bias (and optionally GELU) fused, for training.
//!
//! One `CustomOp3` over (x [n, d_in], W [d_in, d_out], b [d_out]). With GELU the forward keeps
//! the pre-activation `Z = x W + b` for the backward. Backward: `dZ = dY * gelu'(Z)` and the bias
//! gradient (column sums of dZ) in one pass, then `dx = dZ Wᵀ` and `dW = xᵀ dZ`. On CUDA every
//! step is a cuBLASLt call or a kernel of `kernels/linear_train.cu`; on the CPU, candle's matmul
//! and fused loops compute the same function.
use super::linear::{linear, Epilogue};
use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, DType, Layout, Result, Shape, Storage, Tensor, WithDType};
use runtime::{cpu_fwd, cuda_fwd};
use std::sync::Mutex;

/// What follows the affine map in [`linear_train`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    Identity,
    /// GPT-2's tanh-approximated GELU (candle's `gelu`).
    Gelu,
}

/// `act(x W + b)` for `x` [..., d_in], `weight` [d_in, d_out] (GPT-2's Conv1D layout), `bias`
/// [d_out]; differentiable with respect to all three. CPU: f32 and f64; CUDA: f32 (TF32 products
/// when `candle_core::cuda::gemm_reduced_precision_f32()` is set), bf16 and f16.
pub fn linear_train(
    x: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    activation: Activation,
) -> Result<Tensor> {
    let dims = x.dims();
    let shape_error = || {
        candle_core::Error::Msg(format!(
            "linear_train: input {:?}, weight {:?} and bias {:?} do not fit (expected [..., d_in], \
             [d_in, d_out], [d_out])",
            dims,
            weight.dims(),
            bias.dims()
        ))
    };
    let Some(&d_in) = dims.last() else {
        return Err(shape_error());
    };
    let (w_in, d_out) = weight.dims2().map_err(|_| shape_error())?;
    if w_in != d_in || bias.dims() != [d_out] {
        return Err(shape_error());
    }
    let dtype = x.dtype();
    if weight.dtype() != dtype || bias.dtype() != dtype {
        return Err(candle_core::Error::Msg(format!(
            "linear_train: dtypes differ: input {dtype:?}, weight {:?}, bias {:?}",
            weight.dtype(),
            bias.dtype()
        )));
    }
    if !weight.device().same_device(x.device()) || !bias.device().same_device(x.device()) {
        return Err(candle_core::Error::Msg(
            "linear_train: input, weight and bias are on different devices".into(),
        ));
    }
    if !(x.track_op() || weight.track_op() || bias.track_op()) {
        // Nothing to differentiate (evaluation): the forward-only op keeps no pre-activation.
        let epilogue = match activation {
            Activation::Identity => Epilogue::Bias,
            Activation::Gelu => Epilogue::BiasGelu,
        };
        return linear(x, weight, bias, epilogue);
    }
    let rows = x.elem_count() / d_in.max(1);
    let mut out_dims = dims.to_vec();
    *out_dims.last_mut().expect("non-empty dims") = d_out;
    let op = LinearTrain {
        activation,
        pre_activation: Mutex::new(None),
    };
    x.reshape((rows, d_in))?
        .contiguous()?
        .apply_op3(&weight.contiguous()?, &bias.contiguous()?, op)?
        .reshape(out_dims)
}

pub(crate) struct LinearTrain {
    pub activation: Activation,
    /// `Z = x W + b`, kept by the forward for GELU's backward.
    pub pre_activation: Mutex<Option<Tensor>>,
}

impl LinearTrain {
    pub(crate) fn keep(&self, z: Tensor) {
        *self
            .pre_activation
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(z);
    }

    fn kept(&self) -> Result<Tensor> {
        self.pre_activation
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| {
                candle_core::Error::Msg("linear_train: backward before the forward".into())
            })
    }
}

/// GELU (tanh form) and its derivative in the element type.
trait GeluFloat:
    Copy + Send + Sync + std::ops::Add<Output = Self> + std::ops::Mul<Output = Self>
{
    fn gelu(self) -> Self;
    fn gelu_grad(self) -> Self;
}

macro_rules! gelu_float {
    ($t:ty, $sqrt_2_over_pi:expr) => {
        impl GeluFloat for $t {
            fn gelu(self) -> Self {
                let t = ($sqrt_2_over_pi * (self + 0.044715 * self * self * self)).tanh();
                0.5 * self * (1.0 + t)
            }
            fn gelu_grad(self) -> Self {
                let t = ($sqrt_2_over_pi * (self + 0.044715 * self * self * self)).tanh();
                0.5 * (1.0 + t)
                    + 0.5
                        * self
                        * (1.0 - t * t)
                        * $sqrt_2_over_pi
                        * (1.0 + 3.0 * 0.044715 * self * self)
            }
        }
    };
}
gelu_float!(f32, 0.797_884_6_f32);
gelu_float!(f64, 0.797_884_560_802_865_4_f64);

fn contiguous<'a, T>(v: &'a [T], l: &Layout) -> Result<&'a [T]> {
    let (start, end) = l.contiguous_offsets().ok_or_else(|| {
        candle_core::Error::Msg("linear_train: expected contiguous operands".into())
    })?;
    Ok(&v[start..end])
}

/// `z += bias` per row, then `y = act(z)`; returns (y, z) with `z` only for GELU.
fn bias_activation<T: GeluFloat>(
    mut z: Vec<T>,
    bias: &[T],
    activation: Activation,
) -> (Vec<T>, Option<Vec<T>>) {
    for row in z.chunks_exact_mut(bias.len().max(1)) {
        for (v, &b) in row.iter_mut().zip(bias) {
            *v = *v + b;
        }
    }
    match activation {
        Activation::Identity => (z, None),
        Activation::Gelu => {
            let mut y = z.clone();
            parallel_map(&mut y, &z, |v, _| v.gelu());
            (y, Some(z))
        }
    }
}

/// `out[i] = f(out[i], other[i])` split over candle's CPU threads (GELU's tanh dominates the
/// elementwise passes: about 20 ns an element).
fn parallel_map<T: Copy + Send + Sync>(out: &mut [T], other: &[T], f: impl Fn(T, T) -> T + Sync) {
    const MIN_CHUNK: usize = 16 << 10;
    let threads = candle_core::utils::get_num_threads().max(1);
    let chunk = out.len().div_ceil(threads).max(MIN_CHUNK);
    if chunk >= out.len() {
        out.iter_mut().zip(other).for_each(|(o, &a)| *o = f(*o, a));
        return;
    }
    std::thread::scope(|scope| {
        for (o, a) in out.chunks_mut(chunk).zip(other.chunks(chunk)) {
            let f = &f;
            scope.spawn(move || o.iter_mut().zip(a).for_each(|(o, &a)| *o = f(*o, a)));
        }
    });
}

/// `dz = dy * gelu'(z)` (or `dy` itself) and the column sums of `dz`.
fn bias_grad<T: GeluFloat + Default>(
    dy: &[T],
    z: Option<&[T]>,
    cols: usize,
) -> (Option<Vec<T>>, Vec<T>) {
    let mut db = vec![T::default(); cols];
    let dz = z.map(|z| {
        let mut dz = dy.to_vec();
        parallel_map(&mut dz, z, |g, z| g * z.gelu_grad());
        dz
    });
    for row in dz.as_deref().unwrap_or(dy).chunks_exact(cols.max(1)) {
        for (s, &v) in db.iter_mut().zip(row) {
            *s = *s + v;
        }
    }
    (dz, db)
}

/// The elements of a contiguous CPU tensor, borrowed for `f`.
fn with_cpu_slice<T: WithDType, R>(t: &Tensor, f: impl FnOnce(&[T]) -> R) -> Result<R> {
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cpu(cpu) = &*storage else {
        return Err(candle_core::Error::Msg(
            "linear_train: expected a CPU tensor".into(),
        ));
    };
    Ok(f(contiguous(cpu.as_slice::<T>()?, layout)?))
}

/// [`bias_grad`] on CPU tensors: (dz for GELU, db).
fn cpu_bias_grad<T: GeluFloat + Default + WithDType>(
    dy: &Tensor,
    z: Option<&Tensor>,
) -> Result<(Option<Tensor>, Tensor)> {
    let m = dy.dim(1)?;
    let (dz, db) = with_cpu_slice::<T, _>(dy, |dy| match z {
        Some(z) => with_cpu_slice::<T, _>(z, |z| bias_grad(dy, Some(z), m)),
        None => Ok(bias_grad(dy, None, m)),
    })??;
    let dz = dz
        .map(|v| Tensor::from_vec(v, dy.shape(), dy.device()))
        .transpose()?;
    Ok((dz, Tensor::from_vec(db, m, dy.device())?))
}

impl candle_core::CustomOp3 for LinearTrain {
    fn name(&self) -> &'static str {
        "linear-train"
    }

    cpu_fwd!(|op, (x, x_l), (w, w_l), (b, b_l)| {
        let (n, k) = x_l.shape().dims2()?;
        let m = w_l.shape().dims2()?.1;
        let z = x.matmul(w, (1, n, m, k), x_l, w_l)?;
        let (y, z) = match (z, b) {
            (CpuStorage::F32(z), CpuStorage::F32(b)) => {
                let (y, z) = bias_activation(z, contiguous(b, b_l)?, op.activation);
                (CpuStorage::F32(y), z.map(CpuStorage::F32))
            }
            (CpuStorage::F64(z), CpuStorage::F64(b)) => {
                let (y, z) = bias_activation(z, contiguous(b, b_l)?, op.activation);
                (CpuStorage::F64(y), z.map(CpuStorage::F64))
            }
            (z, _) => {
                return Err(candle_core::Error::UnsupportedDTypeForOp(
                    z.dtype(),
                    "linear_train on the CPU (f32, f64)",
                ))
            }
        };
        if let Some(z) = z {
            op.keep(Tensor::from_storage(
                Storage::Cpu(z),
                (n, m),
                candle_core::op::BackpropOp::none(),
                false,
            ));
        }
        Ok((y, Shape::from((n, m))))
    });

    cuda_fwd!(|op, (x, x_l), (w, w_l), (b, b_l)| {
        super::cuda::linear_train::forward(op, (x, x_l), (w, w_l), (b, b_l))
    });

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _b: &Tensor,
        _y: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        // A weight with a gradient sink gets its gradient added there, and none returned.
        let sink = super::grad_sink::sink_for(w);
        let (x, w, dy) = (x.detach(), w.detach(), dy.detach().contiguous()?);
        let z = match self.activation {
            Activation::Identity => None,
            Activation::Gelu => Some(self.kept()?),
        };
        #[cfg(feature = "cuda")]
        if x.device().is_cuda() {
            let (dx, dw, db) =
                super::cuda::linear_train::backward(&x, &w, &dy, z.as_ref(), sink.as_ref())?;
            return Ok((Some(dx), dw, Some(db)));
        }
        let (dz, db) = match dy.dtype() {
            DType::F32 => cpu_bias_grad::<f32>(&dy, z.as_ref())?,
            DType::F64 => cpu_bias_grad::<f64>(&dy, z.as_ref())?,
            other => {
                return Err(candle_core::Error::UnsupportedDTypeForOp(
                    other,
                    "linear_train on the CPU (f32, f64)",
                ))
            }
        };
        let dz = dz.unwrap_or(dy);
        let dx = dz.matmul(&w.t()?)?;
        let dw = x.t()?.matmul(&dz)?;
        if let Some(sink) = sink {
            super::grad_sink::add_into(&sink, &dw)?;
            return Ok((Some(dx), None, Some(db)));
        }
        Ok((Some(dx), Some(dw), Some(db)))
    }
}
