//! The memory a run will need, estimated from its config before anything large is allocated, and the
//! refusal (naming the key and the numbers) when the machine does not have it.
use crate::config::{Config, DataConfig};
use crate::{Error, Result};
use activations::memory::{shortfall, Need};
use candle_core::Device;

/// Dense `[B, n]` f32 tensors alive at once in a step: the pre-activations, their gradient and the
/// selection's scratch.
const DENSE_BATCH_TENSORS: u128 = 3;

/// The memory of a run of `cfg` on activations of width `d_model` (per layer), f32 throughout: the SAE's
/// weights, their gradients and Adam's two moments, a step's batch tensors, the dead-latent counters, a
/// checkpoint's copy while it is written (on the device, and on the host as it is written), the shuffle
/// buffer and the held-out set. A lower bound: kernels' scratch comes on top.
pub fn estimate(cfg: &Config, d_model: usize, cuda: bool) -> Vec<Need> {
    let f32s = |n: u128| n.saturating_mul(4);
    let n = cfg.sae.latents as u128;
    let d_in = (cfg.data_layers() as u128).saturating_mul(d_model as u128);
    let batch = cfg.train.batch_size as u128;
    let params = n
        .saturating_mul(d_in)
        .saturating_mul(2)
        .saturating_add(n)
        .saturating_add(d_in);
    let (buffer, held_out) = match &cfg.data {
        DataConfig::Model {
            buffer_tokens,
            held_out_tokens,
            ..
        } => (*buffer_tokens, *held_out_tokens),
        DataConfig::Shards { buffer_tokens, .. } => (*buffer_tokens, 0),
        DataConfig::Synthetic {
            held_out_tokens, ..
        } => (0, *held_out_tokens),
    };
    let rows = |tokens: usize| f32s((tokens as u128).saturating_mul(d_in));
    let need = |what, key, bytes| Need {
        what,
        key,
        bytes,
        on_device: cuda,
    };
    let mut needs = vec![
        need(
            "SAE weights, gradients and Adam moments",
            "sae.latents",
            f32s(params.saturating_mul(4)),
        ),
        need(
            "a step's dense [train.batch_size, sae.latents] tensors",
            "sae.latents",
            f32s(batch.saturating_mul(n).saturating_mul(DENSE_BATCH_TENSORS)),
        ),
        need(
            "a step's input batch and reconstruction",
            "train.batch_size",
            rows(cfg.train.batch_size).saturating_mul(4),
        ),
        need("dead-latent counters", "sae.latents", n.saturating_mul(8)),
        // Weights (the SAELens file) and Adam's moments, held while a checkpoint is written.
        need(
            "a checkpoint being written",
            "sae.latents",
            f32s(params.saturating_mul(3)),
        ),
        need("shuffle buffer", "data.buffer_tokens", rows(buffer)),
        need(
            "held-out activations",
            "data.held_out_tokens",
            rows(held_out),
        ),
    ];
    if cuda {
        // The checkpoint's copy reaches the host to be written.
        needs.push(Need {
            what: "a checkpoint being written, on the host",
            key: "sae.latents",
            bytes: f32s(params.saturating_mul(3)),
            on_device: false,
        });
    }
    needs
}

/// Refuses a run whose estimate exceeds the memory available now (host: MemAvailable; CUDA: the
/// device's free memory), naming the key of the largest item and every number.
pub fn check(cfg: &Config, d_model: usize, device: &Device) -> Result<()> {
    match shortfall(&estimate(cfg, d_model, device.is_cuda()), device) {
        Some((key, message)) => Err(Error::config(key, message)),
        None => Ok(()),
    }
}
