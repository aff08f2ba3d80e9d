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

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardMeta {
    pub fingerprint: String,
    pub index: usize,
}

pub(super) fn st_dtype_name(dtype: DType) -> &'static str {
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

/// A header longer than this is corrupt (a real one is a few hundred bytes): it is refused before
/// anything of that size is allocated.
pub const MAX_HEADER_BYTES: u64 = 1 << 20;

/// What a shard's header says, after [`parse_header`]'s checks.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardLayout {
    pub meta: ShardMeta,
    /// `F32`, `BF16` or `F16`.
    pub dtype: String,
    /// `[n_tokens, n_hooks, d_model]`.
    pub shape: [usize; 3],
}

/// The length of the JSON header, from a shard's first 8 bytes, checked against the file's length.
pub fn header_len(prefix: [u8; 8], file_len: u64) -> std::result::Result<usize, String> {
    let len = u64::from_le_bytes(prefix);
    if len > MAX_HEADER_BYTES || len > file_len.saturating_sub(8) {
        return Err(format!(
            "header length {len} is implausible for a file of {file_len} bytes; file corrupt"
        ));
    }
    Ok(len as usize)
}

/// Checks a shard's JSON header against the layout [`write`] produces and the file's length: the
/// metadata, `activations` (F32/BF16/F16, 3-D) then `tokens` (U32, one per row), contiguous offsets,
/// and exactly `file_len` bytes in all. Never panics and allocates only in proportion to `header`.
pub fn parse_header(header: &[u8], file_len: u64) -> std::result::Result<ShardLayout, String> {
    let json: serde_json::Value =
        serde_json::from_slice(header).map_err(|e| format!("corrupt header: {e}"))?;
    let meta = json
        .get("__metadata__")
        .and_then(|m| m.get(META_KEY))
        .and_then(|m| m.as_str())
        .ok_or("not an activation shard (no sparsetrain metadata)")?;
    let meta: ShardMeta =
        serde_json::from_str(meta).map_err(|e| format!("corrupt metadata: {e}"))?;
    let tensor = |name: &str| -> std::result::Result<(String, Vec<u64>, [u64; 2]), String> {
        let t = json
            .get(name)
            .ok_or_else(|| format!("no `{name}` tensor"))?;
        let dtype = t.get("dtype").and_then(|d| d.as_str()).unwrap_or_default();
        let dims = |v: Option<&serde_json::Value>| -> Option<Vec<u64>> {
            v?.as_array()?.iter().map(|x| x.as_u64()).collect()
        };
        let shape = dims(t.get("shape")).ok_or_else(|| format!("`{name}`: bad shape"))?;
        let offsets = dims(t.get("data_offsets"))
            .filter(|o| o.len() == 2)
            .ok_or_else(|| format!("`{name}`: bad data_offsets"))?;
        Ok((dtype.to_string(), shape, [offsets[0], offsets[1]]))
    };
    let (dtype, shape, acts) = tensor(ACTIVATIONS_TENSOR)?;
    let size = match dtype.as_str() {
        "F32" => 4,
        "BF16" | "F16" => 2,
        other => {
            return Err(format!(
                "`{ACTIVATIONS_TENSOR}`: dtype `{other}`, expected F32, BF16 or F16"
            ))
        }
    };
    let [n, hooks, d] = shape[..] else {
        return Err(format!(
            "`{ACTIVATIONS_TENSOR}`: shape {shape:?} is not 3-D"
        ));
    };
    let acts_bytes = n
        .checked_mul(hooks)
        .and_then(|x| x.checked_mul(d))
        .and_then(|x| x.checked_mul(size))
        .ok_or_else(|| format!("`{ACTIVATIONS_TENSOR}`: shape {shape:?} overflows"))?;
    if acts != [0, acts_bytes] {
        return Err(format!(
            "`{ACTIVATIONS_TENSOR}`: data_offsets {acts:?}, expected [0, {acts_bytes}] for shape {shape:?}"
        ));
    }
    let (tdtype, tshape, toks) = tensor(TOKENS_TENSOR)?;
    if tdtype != "U32" || tshape != [n] {
        return Err(format!(
            "`{TOKENS_TENSOR}`: {tdtype} {tshape:?}, expected U32 [{n}]"
        ));
    }
    let end = n.checked_mul(4).and_then(|t| t.checked_add(acts_bytes));
    if end != Some(toks[1]) || toks[0] != acts_bytes {
        return Err(format!(
            "`{TOKENS_TENSOR}`: data_offsets {toks:?} do not follow the activations"
        ));
    }
    let want = (header.len() as u64)
        .checked_add(8)
        .and_then(|h| h.checked_add(toks[1]));
    if want != Some(file_len) {
        return Err(format!(
            "the file has {file_len} bytes, its header describes {}; truncated or corrupt",
            want.map_or_else(|| "more than 2^64".into(), |w| w.to_string())
        ));
    }
    let usize_of = |x: u64| usize::try_from(x).map_err(|_| format!("shape {shape:?} too large"));
    Ok(ShardLayout {
        meta,
        dtype,
        shape: [usize_of(n)?, usize_of(hooks)?, usize_of(d)?],
    })
}

/// Reads and checks a shard's header ([`parse_header`]), reading only the header.
pub fn read_layout(path: &Path) -> Result<ShardLayout> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).map_err(|e| Error::file("opening", path, e))?;
    let file_len = f
        .metadata()
        .map_err(|e| Error::file("inspecting", path, e))?
        .len();
    let mut prefix = [0u8; 8];
    f.read_exact(&mut prefix)
        .map_err(|e| Error::file("reading the header of", path, e))?;
    let len = header_len(prefix, file_len).map_err(|m| Error::shard(path, m))?;
    let mut header = vec![0u8; len];
    f.read_exact(&mut header)
        .map_err(|e| Error::file("reading the header of", path, e))?;
    parse_header(&header, file_len).map_err(|m| Error::shard(path, m))
}

/// The sha256 of a file, read in pieces (a shard may be larger than is wise to hold twice).
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = std::fs::File::open(path).map_err(|e| Error::file("opening", path, e))?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut f, &mut hasher).map_err(|e| Error::file("reading", path, e))?;
    Ok(hex::encode(hasher.finalize()))
}
