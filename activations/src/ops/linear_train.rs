//! Differentiable linear layer with its bias (and optionally GELU) fused, for training.
use candle_core::{Result, Tensor};

/// What follows the affine map in [`linear_train`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    Identity,
    /// GPT-2's tanh-approximated GELU.
    Gelu,
}

/// `act(x W + b)` for `x` [..., d_in], `weight` [d_in, d_out] (GPT-2's Conv1D layout), `bias`
/// [d_out]; differentiable with respect to all three.
pub fn linear_train(
    x: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    activation: Activation,
) -> Result<Tensor> {
    let _ = (x, weight, bias, activation);
    Err(candle_core::Error::Msg(
        "linear_train: not built yet".into(),
    ))
}
