//! The default CPU model: a tiny GPT-2 (4 layers, width 128, GPT-2 vocabulary) whose deterministic
//! random weights are written on first use to `model_dir()`. A model trained and saved there
//! (e.g. by `finetune`) is loaded instead.
use crate::error::Result;
use crate::gpt2::{Gpt2, Gpt2Config};
use candle_core::{DType, Device};
use std::path::PathBuf;

/// Seed of the tiny model's random weights.
pub const TINY_SEED: u64 = 20261130;

/// The project's data directory: `$SPARSETRAIN_HOME`, else `runs/` under the current directory.
pub fn data_home() -> PathBuf {
    std::env::var_os("SPARSETRAIN_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("runs"))
}

/// Where the default tiny model lives: `<data_home>/.models/tiny-gpt2` (config.json + model.safetensors).
pub fn model_dir() -> PathBuf {
    data_home().join(".models").join("tiny-gpt2")
}

/// The default tiny model in f32; see [`default_model_as`].
pub fn default_model(device: &Device) -> Result<Gpt2> {
    default_model_as(DType::F32, device)
}

/// Loads the tiny model from [`model_dir`] if present; otherwise generates it from [`TINY_SEED`]
/// and saves it there (a failed save only warns: the model is still returned).
pub fn default_model_as(dtype: DType, device: &Device) -> Result<Gpt2> {
    let dir = model_dir();
    if dir.join("config.json").is_file() && dir.join("model.safetensors").is_file() {
        return Ok(Gpt2::load(&dir.to_string_lossy(), dtype, device)?);
    }
    let model = Gpt2::random(Gpt2Config::tiny(), TINY_SEED, DType::F32, &Device::Cpu)?;
    if let Err(e) = model.save_hf(&dir) {
        tracing::warn!("could not cache the tiny model in {}: {e}", dir.display());
    }
    if dtype == DType::F32 && device.is_cpu() {
        return Ok(model);
    }
    Ok(
        Gpt2::load(&dir.to_string_lossy(), dtype, device).or_else(|_| {
            Gpt2::random(Gpt2Config::tiny(), TINY_SEED, DType::F32, &Device::Cpu)?
                .converted(dtype, device)
        })?,
    )
}
