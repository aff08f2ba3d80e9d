//! `y = x W + b`, optionally followed by GELU (tanh form) or a residual add, for GPT-2's `Conv1D`
//! (weights stored [in, out]).
use candle_core::{Result, Tensor};

/// What follows the product `x W`.
#[derive(Debug, Clone, Copy)]
pub enum Epilogue<'a> {
    /// `x W + b`
    Bias,
    /// `gelu_new(x W + b)`
    BiasGelu,
    /// `residual + x W + b`
    BiasResidual(&'a Tensor),
}

/// `x` [..., d_in], `weight` [d_in, d_out], `bias` [d_out] -> [..., d_out]. A residual has the
/// output's shape. On CUDA the bias, GELU and residual add run in the GEMM's epilogue.
pub fn linear(x: &Tensor, weight: &Tensor, bias: &Tensor, epilogue: Epilogue) -> Result<Tensor> {
    let dims = x.dims();
    let d_in = *dims
        .last()
        .ok_or_else(|| candle_core::Error::Msg("linear: input is a scalar".into()))?;
    let (w_in, d_out) = weight.dims2()?;
    if w_in != d_in || bias.dims() != [d_out] {
        return Err(candle_core::Error::Msg(format!(
            "linear: input {:?}, weight {:?}, bias {:?} do not fit",
            dims,
            weight.dims(),
            bias.dims()
        )));
    }
    let mut out_dims = dims.to_vec();
    *out_dims.last_mut().expect("non-empty dims") = d_out;
    if let Epilogue::BiasResidual(r) = epilogue {
        if r.dims() != out_dims.as_slice() {
            return Err(candle_core::Error::Msg(format!(
                "linear: residual {:?} differs from the output {:?}",
                r.dims(),
                out_dims
            )));
        }
    }
    let rows = x.elem_count() / d_in.max(1);
    let x2 = x.reshape((rows, d_in))?;
    #[cfg(feature = "cuda")]
    if x.device().is_cuda() && super::cuda::linear::supports(x, weight, bias, epilogue) {
        return super::cuda::linear::linear(&x2, weight, bias, epilogue)?.reshape(out_dims);
    }
    let y = x2.matmul(weight)?.broadcast_add(bias)?;
    let y = match epilogue {
        Epilogue::Bias => y,
        Epilogue::BiasGelu => y.gelu()?,
        Epilogue::BiasResidual(r) => (y + r.reshape((rows, d_out))?)?,
    };
    y.reshape(out_dims)
}
