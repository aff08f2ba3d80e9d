//! The memory fine-tuning will need, estimated from the config and the model's shape before the
//! trainer allocates, and the refusal (naming the key and the numbers) when the machine does not have it.
use crate::{config::FinetuneConfig, Error, Result};
use activations::memory::{shortfall, Need};
use candle_core::Device;
use gpt2::Gpt2Config;

/// Floats per token, layer and unit of width that a block keeps for its backward pass (layer-norm
/// inputs, q/k/v, attention output, the 4d-wide MLP hidden before and after GELU, residuals).
const SAVED_PER_TOKEN_LAYER_WIDTH: u128 = 20;

/// Parameters of a GPT-2 of this shape (tied embeddings).
pub fn parameters(m: &Gpt2Config) -> u128 {
    let (v, p, d, l) = (
        m.vocab_size as u128,
        m.n_positions as u128,
        m.n_embd as u128,
        m.n_layer as u128,
    );
    let block = d
        .saturating_mul(d)
        .saturating_mul(12)
        .saturating_add(13 * d);
    v.saturating_mul(d)
        .saturating_add(p.saturating_mul(d))
        .saturating_add(l.saturating_mul(block))
        .saturating_add(2 * d)
}

/// What fine-tuning `model` with `cfg` allocates beyond the loaded model, f32 throughout: the trainable
/// copy, gradients, AdamW's moments, the error-feedback residual (and momentum), and the activations a
/// step keeps for its backward pass. A lower bound.
pub fn estimate(cfg: &FinetuneConfig, model: &Gpt2Config, cuda: bool) -> Vec<Need> {
    let f32s = |n: u128| n.saturating_mul(4);
    let copies = 5 + u128::from(cfg.sparsify.momentum_correction);
    let (b, t) = (cfg.train.batch_size as u128, cfg.data.context as u128);
    let (d, l, heads, v) = (
        model.n_embd as u128,
        model.n_layer as u128,
        model.n_head as u128,
        model.vocab_size as u128,
    );
    let per_layer =
        (SAVED_PER_TOKEN_LAYER_WIDTH * d).saturating_add(heads.saturating_mul(t).saturating_mul(2));
    let tokens = b.saturating_mul(t);
    // The CPU computes the loss over chunks of rows (`ops::next_token_cross_entropy_chunked`): one
    // chunk of logits at a time; CUDA holds the logits and their gradient whole.
    let logits = if cuda {
        tokens.saturating_mul(v).saturating_mul(2)
    } else {
        tokens.min(gpt2::ops::loss_chunk_rows(model.vocab_size) as u128) * v
    };
    vec![
        Need {
            what: "trainable weights, gradients, AdamW moments and the error-feedback residual",
            key: "model.name",
            bytes: f32s(parameters(model).saturating_mul(copies)),
            on_device: cuda,
        },
        Need {
            what: "a step's activations for the backward pass and the logits",
            key: "train.batch_size",
            bytes: f32s(
                tokens
                    .saturating_mul(l.saturating_mul(per_layer))
                    .saturating_add(logits),
            ),
            on_device: cuda,
        },
    ]
}

/// Refuses a run whose estimate exceeds the memory available now (host: MemAvailable; CUDA: free
/// device memory), naming the key of the largest item and every number.
pub fn check(cfg: &FinetuneConfig, model: &Gpt2Config, device: &Device) -> Result<()> {
    match shortfall(&estimate(cfg, model, device.is_cuda()), device) {
        Some((key, message)) => Err(Error::config(key, message)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpt2_has_124m_parameters() {
        let p = parameters(&Gpt2Config::gpt2());
        assert_eq!(p, 124_439_808);
    }
}
