//! One shard on disk: a safetensors file with `activations` and `tokens`, whose header carries
//! the extraction fingerprint and the shard's index (one metadata key, so the bytes are stable).
use super::manifest::{ACTIVATIONS_TENSOR, TOKENS_TENSOR};
use crate::error::{Error, Result};
use crate::fsutil;
use candle_core::DType;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::Path;

const META_KEY: &str = "sparsetrain";

pub fn shard_file_name(index: usize) -> String {
    format!("shard-{index:05}.safetensors")
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardMeta {
    pub fingerprint: String,
    pub index: usize,
}

fn st_dtype_name(dtype: DType) -> &'static str {
    match dtype {
        DType::BF16 => "BF16",
        DType::F16 => "F16",
        _ => "F32",
    }
}

/// Writes a shard atomically (temporary sibling, fsync, rename) straight from its parts, hashing
/// the bytes as they go out, and returns the file's sha256. `acts` holds
/// `n_tokens * n_hooks * d_model` values of `dtype` as little-endian bytes. The file is a
/// safetensors file: u64 header length, JSON header (padded with spaces to a multiple of 8),
/// then the activations and the token ids.
pub fn write(
    path: &Path,
    meta: &ShardMeta,
    acts: &[u8],
    dtype: DType,
    shape: [usize; 3],
    tokens: &[u32],
) -> Result<String> {
    let want = shape.iter().product::<usize>() * dtype.size_in_bytes();
    if acts.len() != want || shape[0] != tokens.len() {
        return Err(Error::shard(
            path,
            format!(
                "{} activation bytes and {} tokens do not fit shape {shape:?} of {dtype:?}",
                acts.len(),
                tokens.len()
            ),
        ));
    }
    let token_bytes: &[u8] = bytemuck::cast_slice(tokens);
    let meta_json =
        serde_json::to_string(meta).map_err(|e| candle_core::Error::Msg(e.to_string()))?;
    // serde_json orders keys: "__metadata__", "activations", "tokens".
    let header = serde_json::json!({
        "__metadata__": { META_KEY: meta_json },
        ACTIVATIONS_TENSOR: {
            "dtype": st_dtype_name(dtype),
            "shape": shape,
            "data_offsets": [0, acts.len()],
        },
        TOKENS_TENSOR: {
            "dtype": "U32",
            "shape": [tokens.len()],
            "data_offsets": [acts.len(), acts.len() + token_bytes.len()],
        },
    });
    let mut header =
        serde_json::to_vec(&header).map_err(|e| candle_core::Error::Msg(e.to_string()))?;
    header.resize(header.len().next_multiple_of(8), b' ');
    let len = (header.len() as u64).to_le_bytes();
    let mut hasher = Sha256::new();
    fsutil::atomic_write_parts(path, &[&len, &header, acts, token_bytes], |part| {
        hasher.update(part)
    })?;
    Ok(hex::encode(hasher.finalize()))
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The metadata in a shard's header, reading only the header.
pub fn read_meta(path: &Path) -> Result<ShardMeta> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut len = [0u8; 8];
    f.read_exact(&mut len).map_err(|e| Error::io(path, e))?;
    let len = u64::from_le_bytes(len);
    if len > 100_000_000 {
        return Err(Error::shard(
            path,
            "header length is implausible; file corrupt",
        ));
    }
    let mut header = vec![0u8; len as usize];
    f.read_exact(&mut header).map_err(|e| Error::io(path, e))?;
    let json: serde_json::Value = serde_json::from_slice(&header)
        .map_err(|e| Error::shard(path, format!("corrupt header: {e}")))?;
    let meta = json
        .get("__metadata__")
        .and_then(|m| m.get(META_KEY))
        .and_then(|m| m.as_str())
        .ok_or_else(|| Error::shard(path, "not an activation shard (no sparsetrain metadata)"))?;
    serde_json::from_str(meta).map_err(|e| Error::shard(path, format!("corrupt metadata: {e}")))
}
