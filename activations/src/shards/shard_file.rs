//! One shard on disk: a safetensors file with `activations` and `tokens`, whose header carries
//! the extraction fingerprint and the shard's index (one metadata key, so the bytes are stable).
use super::manifest::{ACTIVATIONS_TENSOR, TOKENS_TENSOR};
use crate::error::{Error, Result};
use candle_core::DType;
use safetensors::tensor::TensorView;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
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

fn st_dtype(dtype: DType) -> safetensors::Dtype {
    match dtype {
        DType::BF16 => safetensors::Dtype::BF16,
        DType::F16 => safetensors::Dtype::F16,
        _ => safetensors::Dtype::F32,
    }
}

/// Serializes a shard: `acts` holds `n_tokens * n_hooks * d_model` values of `dtype` as bytes.
pub fn encode(
    meta: &ShardMeta,
    acts: &[u8],
    dtype: DType,
    shape: [usize; 3],
    tokens: &[u32],
) -> Result<Vec<u8>> {
    let err = |e: safetensors::SafeTensorError| candle_core::Error::Msg(e.to_string());
    let token_bytes: &[u8] = bytemuck::cast_slice(tokens);
    let views = vec![
        (
            ACTIVATIONS_TENSOR,
            TensorView::new(st_dtype(dtype), shape.to_vec(), acts).map_err(err)?,
        ),
        (
            TOKENS_TENSOR,
            TensorView::new(safetensors::Dtype::U32, vec![tokens.len()], token_bytes)
                .map_err(err)?,
        ),
    ];
    let meta_json =
        serde_json::to_string(meta).map_err(|e| candle_core::Error::Msg(e.to_string()))?;
    let metadata = HashMap::from([(META_KEY.to_string(), meta_json)]);
    Ok(safetensors::serialize(views, Some(metadata)).map_err(err)?)
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
