//! One string names any model the tools can run.
use crate::error::{Error, Result};
use candle_core::{DType, Device};
use gpt2::{Gpt2, Gpt2Config};
use models::{Depth, Model};

/// Loads a model from a spec, whole ([`load_model_to`] with [`Depth::Full`]).
pub fn load_model(spec: &str, dtype: DType, device: &Device) -> Result<Model> {
    load_model_to(spec, dtype, device, Depth::Full)
}

/// Loads a model from a spec, reading the blocks `depth` asks for (GPT-2 always whole):
/// - `tiny`: the default tiny GPT-2, trained on the shipped corpus ([`crate::tiny::default_model_as`]);
/// - `tiny-random`: the same shape with its random initialization ([`crate::tiny::random_model`]);
/// - `random:<shape>` or `random:<shape>:<seed>`: random weights of a real shape, for benchmarks and
///   tests: GPT-2's (`gpt2`, `medium`, `large`, `xl`, `tiny`) or [`models::random_shapes`]
///   (`llama-3.1-8b`, `qwen2.5-7b`, `gemma-2-2b`, `gemma-2-9b`, `pythia-1.4b`);
/// - anything else: a directory or Hugging Face hub id, `hf:` optional ([`models::locate`]); the
///   family comes from `config.json`'s `model_type`.
pub fn load_model_to(spec: &str, dtype: DType, device: &Device, depth: Depth) -> Result<Model> {
    if spec == "tiny" {
        return Ok(Model::Gpt2(crate::tiny::default_model_as(dtype, device)?));
    }
    if spec == "tiny-random" {
        return Ok(Model::Gpt2(crate::tiny::random_model(dtype, device)?));
    }
    if let Some(rest) = spec.strip_prefix("random:") {
        let (shape, seed) = rest.split_once(':').unwrap_or((rest, "0"));
        let seed: u64 = seed
            .parse()
            .map_err(|_| Error::config("model", format!("bad seed `{seed}` in `{spec}`")))?;
        if let Some(cfg) = Gpt2Config::by_name(shape) {
            return Ok(Model::Gpt2(Gpt2::random(cfg, seed, dtype, device)?));
        }
        return Model::random(shape, seed, dtype, device, depth).map_err(|e| {
            Error::config(
                "model",
                format!("`{spec}`: {e}; GPT-2's sizes: gpt2, medium, large, xl, tiny"),
            )
        });
    }
    Ok(Model::load(spec, dtype, device, depth)?)
}

/// What identifies the weights [`load_model`] loads for `spec`, as run.json records it: `sha256:<hex>`
/// of the safetensors file(s) read (see [`files_sha256`]) or, for the shipped tiny model, of its bytes
/// embedded in the binary (`activations/assets/tiny-gpt2.safetensors.zst`); random weights are named by
/// what generates them (`random:tiny:20261130`), as they have no file.
pub fn weights_identity(spec: &str) -> Result<String> {
    if spec == "tiny" {
        return crate::tiny::default_weights_identity();
    }
    if spec == "tiny-random" {
        return Ok(format!("random:tiny:{}", crate::tiny::TINY_SEED));
    }
    if let Some(rest) = spec.strip_prefix("random:") {
        let (size, seed) = rest.split_once(':').unwrap_or((rest, "0"));
        return Ok(format!("random:{size}:{seed}"));
    }
    files_sha256(&models::locate(spec)?.weights)
}

/// `sha256:<hex>` of the bytes of `files` read one after the other: for a single file what
/// `sha256sum` prints. Reads them whole once (about 2 s per GB on one core).
pub fn files_sha256(files: &[std::path::PathBuf]) -> Result<String> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    for path in files {
        let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        loop {
            let n = file.read(&mut buf).map_err(|e| Error::io(path, e))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
        }
    }
    Ok(format!("sha256:{}", hex::encode(hasher.finalize())))
}

/// `sha256:<hex>` of bytes held in memory.
pub fn bytes_sha256(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Whether the model `spec` names has random weights: its CE losses sit near ln(vocabulary) and
/// CE-loss recovered says nothing about an SAE spliced into it.
pub fn has_random_weights(spec: &str) -> bool {
    spec == "tiny-random" || spec.starts_with("random:")
}

/// What runs print and record beside CE-loss recovered for a model with random weights.
pub fn random_weights_warning(spec: &str) -> Option<String> {
    has_random_weights(spec).then(|| {
        format!(
            "model `{spec}` has random weights: its clean CE is about ln(vocabulary) (10.8 for \
             GPT-2), like zero ablation, so CE-loss recovered measures nothing; use a trained model (`tiny`)"
        )
    })
}
