//! One string names any model the tools can run.
use crate::error::{Error, Result};
use crate::gpt2::{Gpt2, Gpt2Config};
use candle_core::{DType, Device};

/// Loads a model from a spec:
/// - `tiny`: the default tiny model, trained on the shipped corpus ([`crate::tiny::default_model_as`]);
/// - `tiny-random`: the same shape with its random initialization ([`crate::tiny::random_model`]);
/// - `random:<size>` or `random:<size>:<seed>`: GPT-2 shapes (`gpt2`, `medium`, `large`, `xl`,
///   `tiny`) with random weights, for benchmarks and tests;
/// - anything else: a directory or Hugging Face hub id ([`crate::gpt2::locate`]).
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
    files_sha256(&crate::gpt2::locate(spec)?.weights)
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

/// Parses `f32`, `bf16`, `f16` (also `float32`, `bfloat16`, `float16`).
pub fn parse_dtype(key: &str, s: &str) -> Result<DType> {
    match s {
        "f32" | "float32" => Ok(DType::F32),
        "bf16" | "bfloat16" => Ok(DType::BF16),
        "f16" | "float16" => Ok(DType::F16),
        _ => Err(Error::config(
            key,
            format!("`{s}`: expected f32, bf16 or f16"),
        )),
    }
}

/// Parses `cpu`, `cuda`, `cuda:N` (through [`eval::DeviceSpec`]) and opens the device.
pub fn parse_device(s: &str) -> Result<Device> {
    let spec = s.parse().map_err(|e: String| Error::config("device", e))?;
    open_device("device", spec)
}

/// Opens the device a config's `key` names; a CUDA device on a build without CUDA, or one that
/// does not exist, is an error naming the key.
pub fn open_device(key: &str, spec: eval::DeviceSpec) -> Result<Device> {
    match spec {
        eval::DeviceSpec::Cpu => Ok(Device::Cpu),
        eval::DeviceSpec::Cuda(_) if !candle_core::utils::cuda_is_available() => {
            Err(Error::config(
                key,
                format!(
                    "{spec}: this build has no CUDA support (build with --features cuda, or use \"cpu\")"
                ),
            ))
        }
        eval::DeviceSpec::Cuda(n) => {
            Device::new_cuda(n).map_err(|e| Error::config(key, format!("{spec}: {e}")))
        }
    }
}

/// The candle dtype of a config's dtype value.
pub fn candle_dtype(d: eval::Dtype) -> DType {
    match d {
        eval::Dtype::F32 => DType::F32,
        eval::Dtype::Bf16 => DType::BF16,
        eval::Dtype::F16 => DType::F16,
    }
}
