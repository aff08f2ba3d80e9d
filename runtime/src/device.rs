//! Opening the device a config names: the one opener every command uses.

use crate::config::{DeviceSpec, Dtype};
use crate::error::{Error, Result};
use candle_core::{DType, Device};

/// Parses `cpu`, `cuda`, `cuda:N` (through [`DeviceSpec`]) and opens the device; errors name the
/// config key `device`.
pub fn parse_device(s: &str) -> Result<Device> {
    let spec = s.parse().map_err(|e: String| Error::config("device", e))?;
    open_device("device", spec)
}

/// Opens the device a config's `key` names; a CUDA device on a build without CUDA, or one that
/// does not exist, is an error naming the key.
pub fn open_device(key: &str, spec: DeviceSpec) -> Result<Device> {
    match spec {
        DeviceSpec::Cpu => Ok(Device::Cpu),
        DeviceSpec::Cuda(_) if !candle_core::utils::cuda_is_available() => Err(Error::config(
            key,
            format!("{spec}: this build has no CUDA support (build with --features cuda, or use \"cpu\")"),
        )),
        DeviceSpec::Cuda(n) => {
            Device::new_cuda(n).map_err(|e| Error::config(key, format!("{spec}: {e}")))
        }
    }
}

/// The candle dtype of a config's dtype value.
pub fn candle_dtype(d: Dtype) -> DType {
    match d {
        Dtype::F32 => DType::F32,
        Dtype::Bf16 => DType::BF16,
        Dtype::F16 => DType::F16,
    }
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
