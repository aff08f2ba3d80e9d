//! The default CPU model: a tiny GPT-2 (4 layers, width 128, GPT-2 vocabulary) trained on the shipped
//! Shakespeare by `finetune configs/tiny-model-recipe.toml`, shipped inside the binary (bf16, zstd; see
//! docs/tiny-model.md). A model installed in [`model_dir`] (by `finetune --install-default`) is loaded instead.
use crate::error::{Error, Result};
use candle_core::{DType, Device};
use gpt2::{Gpt2, Gpt2Config};
use std::path::PathBuf;

/// Seed of the tiny model's random initialization (the start of its training).
pub const TINY_SEED: u64 = 20261130;

/// The trained weights: Hugging Face names, bf16, safetensors, zstd-compressed. The embedding rows of
/// tokens that never occur in the shipped corpus share one row (their mean), which is what makes the
/// file small.
const SHIPPED_WEIGHTS: &[u8] = include_bytes!("../assets/tiny-gpt2.safetensors.zst");

/// The project's cache: `$SPARSETRAIN_CACHE`, else `$XDG_CACHE_HOME/sparsetrain`, else
/// `~/.cache/sparsetrain` (never relative to the working directory).
pub fn cache_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("SPARSETRAIN_CACHE").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    if let Some(p) = std::env::var_os("XDG_CACHE_HOME").filter(|p| !p.is_empty()) {
        return PathBuf::from(p).join("sparsetrain");
    }
    match std::env::var_os("HOME").filter(|p| !p.is_empty()) {
        Some(home) => PathBuf::from(home).join(".cache").join("sparsetrain"),
        None => std::env::temp_dir().join("sparsetrain"),
    }
}

/// Where a trained tiny model is installed: `<cache_dir>/models/tiny-gpt2` (config.json +
/// model.safetensors, the Hugging Face layout).
pub fn model_dir() -> PathBuf {
    cache_dir().join("models").join("tiny-gpt2")
}

/// The default tiny model in f32; see [`default_model_as`].
pub fn default_model(device: &Device) -> Result<Gpt2> {
    default_model_as(DType::F32, device)
}

/// The model installed in [`model_dir`] if there is one, else the shipped one ([`shipped_model`]).
pub fn default_model_as(dtype: DType, device: &Device) -> Result<Gpt2> {
    let dir = model_dir();
    if dir.join("config.json").is_file() && dir.join("model.safetensors").is_file() {
        tracing::info!(
            "tiny: the model installed in {} (remove it for the shipped one)",
            dir.display()
        );
        return Ok(Gpt2::load(&dir.to_string_lossy(), dtype, device)?);
    }
    shipped_model(dtype, device)
}

/// What identifies the weights [`default_model_as`] loads (see [`crate::models::weights_identity`]).
pub fn default_weights_identity() -> Result<String> {
    let dir = model_dir();
    let installed = dir.join("model.safetensors");
    if dir.join("config.json").is_file() && installed.is_file() {
        return crate::models::files_sha256(&[installed]);
    }
    Ok(crate::models::bytes_sha256(SHIPPED_WEIGHTS))
}

/// The trained tiny model shipped in the binary.
pub fn shipped_model(dtype: DType, device: &Device) -> Result<Gpt2> {
    let bad = |message: String| Error::Model {
        path: PathBuf::from("activations/assets/tiny-gpt2.safetensors.zst"),
        message,
    };
    let bytes = zstd::decode_all(SHIPPED_WEIGHTS).map_err(|e| bad(e.to_string()))?;
    let vb = candle_nn::VarBuilder::from_buffered_safetensors(bytes, dtype, device)
        .map_err(|e| bad(e.to_string()))?;
    Ok(Gpt2::new(Gpt2Config::tiny(), vb)?)
}

/// The tiny model's random initialization (from [`TINY_SEED`]): what `finetune` starts from, and a
/// model whose CE-loss recovered means nothing.
pub fn random_model(dtype: DType, device: &Device) -> Result<Gpt2> {
    Ok(
        Gpt2::random(Gpt2Config::tiny(), TINY_SEED, DType::F32, &Device::Cpu)?
            .converted(dtype, device)?,
    )
}
