//! One string names any model the tools can run.
use crate::error::{Error, Result};
use candle_core::{DType, Device};
use gpt2::{Gpt2, Gpt2Config};

/// Loads a model from a spec:
/// - `tiny`: the default tiny model, trained on the shipped corpus ([`crate::tiny::default_model_as`]);
/// - `tiny-random`: the same shape with its random initialization ([`crate::tiny::random_model`]);
/// - `random:<size>` or `random:<size>:<seed>`: GPT-2 shapes (`gpt2`, `medium`, `large`, `xl`,
///   `tiny`) with random weights, for benchmarks and tests;
/// - anything else: a directory or Hugging Face hub id ([`gpt2::locate`]).
pub fn load_model(spec: &str, dtype: DType, device: &Device) -> Result<Gpt2> {
    if spec == "tiny" {
        return crate::tiny::default_model_as(dtype, device);
    }
    if spec == "tiny-random" {
        return crate::tiny::random_model(dtype, device);
    }
    if let Some(rest) = spec.strip_prefix("random:") {
        let (size, seed) = rest.split_once(':').unwrap_or((rest, "0"));
        let cfg = Gpt2Config::by_name(size).ok_or_else(|| {
            Error::config(
                "model",
                format!("unknown size `{size}` in `{spec}`: use gpt2, medium, large, xl or tiny"),
            )
        })?;
        let seed: u64 = seed
            .parse()
            .map_err(|_| Error::config("model", format!("bad seed `{seed}` in `{spec}`")))?;
        return Ok(Gpt2::random(cfg, seed, dtype, device)?);
    }
    Ok(Gpt2::load(spec, dtype, device)?)
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
    files_sha256(&gpt2::locate(spec)?.weights)
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
            "model `{spec}` has random weights: its clean CE is about ln(50257) = 10.8, like \
             zero ablation, so CE-loss recovered measures nothing; use a trained model (`tiny`)"
        )
    })
}
