//! Differentiable causal self-attention on the packed `c_attn` output, for training.
use candle_core::{Result, Tensor};

/// Causal multi-head attention: `qkv` [b, t, 3d] (q, k, v packed as GPT-2's `c_attn` writes them)
/// -> [b, t, d], scores scaled by 1/sqrt(d / n_head); differentiable with respect to `qkv`.
pub fn causal_attention_train(qkv: &Tensor, n_head: usize) -> Result<Tensor> {
    let _ = (qkv, n_head);
    Err(candle_core::Error::Msg(
        "causal_attention_train: not built yet".into(),
    ))
}
