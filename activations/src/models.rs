//! One string names any model the tools can run.
use crate::error::{Error, Result};
use crate::gpt2::{Gpt2, Gpt2Config};
use candle_core::{DType, Device};

/// Loads a model from a spec:
/// - `tiny`: the default tiny model ([`crate::tiny::default_model_as`]);
/// - `random:<size>` or `random:<size>:<seed>`: GPT-2 shapes (`gpt2`, `medium`, `large`, `xl`,
///   `tiny`) with random weights, for benchmarks and tests;
/// - anything else: a directory or Hugging Face hub id ([`crate::gpt2::locate`]).
pub fn load_model(spec: &str, dtype: DType, device: &Device) -> Result<Gpt2> {
    if spec == "tiny" {
        return crate::tiny::default_model_as(dtype, device);
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

/// Parses `cpu`, `cuda`, `cuda:N`.
pub fn parse_device(s: &str) -> Result<Device> {
    match s {
        "cpu" => Ok(Device::Cpu),
        "cuda" => Ok(Device::new_cuda(0)?),
        _ => match s.strip_prefix("cuda:").and_then(|n| n.parse().ok()) {
            Some(n) => Ok(Device::new_cuda(n)?),
            None => Err(Error::config(
                "device",
                format!("`{s}`: expected cpu, cuda or cuda:N"),
            )),
        },
    }
}
