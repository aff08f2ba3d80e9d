//! `manifest.json`: what a directory of activation shards holds.
use crate::error::{Error, Result};
use crate::fsutil;
use candle_core::DType;
use gpt2::HookPoint;
use serde::{Deserialize, Serialize};
use std::path::Path;

pub const MANIFEST_FILE: &str = "manifest.json";
pub const FORMAT: &str = "sparsetrain-activations/1";

/// The tensors in every shard.
pub const ACTIVATIONS_TENSOR: &str = "activations"; // [n_tokens, n_hooks, d_model]
pub const TOKENS_TENSOR: &str = "tokens"; // [n_tokens] u32

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CorpusInfo {
    pub spec: String,
    pub split: crate::corpus::Split,
    pub heldout_fraction: f64,
    /// sha256 of the documents used (see [`crate::corpus::CorpusSource::fingerprint`]).
    pub fingerprint: String,
    /// Documents of the split; 0 for a streamed corpus, whose documents are not counted ahead.
    pub documents: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardInfo {
    pub file: String,
    pub n_tokens: usize,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub format: String,
    pub model: String,
    /// The model's hyperparameters ([`models::Model::config_json`]; GPT-2's as `Gpt2Config`).
    pub model_config: serde_json::Value,
    pub model_dtype: String,
    pub hook_points: Vec<HookPoint>,
    pub d_model: usize,
    /// Shard dtype: `f32`, `bf16` or `f16`.
    pub dtype: String,
    pub context_len: usize,
    pub prepend_bos: bool,
    pub drop_bos: bool,
    pub tokens_per_shard: usize,
    pub total_tokens: usize,
    pub corpus: CorpusInfo,
    /// sha256 of every setting that decides the shards' bytes; shards carry it too.
    pub fingerprint: String,
    pub shards: Vec<ShardInfo>,
    /// What identifies the model's weights ([`crate::models::weights_identity`]); absent in
    /// extractions written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_sha256: Option<String>,
}

pub fn dtype_name(dtype: DType) -> &'static str {
    match dtype {
        DType::BF16 => "bf16",
        DType::F16 => "f16",
        _ => "f32",
    }
}

impl Manifest {
    pub fn shard_dtype(&self) -> Result<DType> {
        Ok(runtime::device::parse_dtype("manifest.dtype", &self.dtype)?)
    }

    pub fn read(dir: &Path) -> Result<Self> {
        let path = dir.join(MANIFEST_FILE);
        let text = std::fs::read_to_string(&path).map_err(|e| {
            Error::shard(
                &path,
                format!("cannot read the manifest ({e}); is this an `extract` output directory whose run finished?"),
            )
        })?;
        Self::parse(&text, &path)
    }

    /// Parses and checks a manifest's text; `path` is named in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let m: Self = serde_json::from_str(text).map_err(|source| Error::Json {
            path: path.to_path_buf(),
            source,
        })?;
        m.check().map_err(|message| Error::shard(path, message))?;
        Ok(m)
    }

    /// What a reader relies on: the format, a known dtype, shard files that are plain names inside the
    /// directory (never `../x` or `/x`), each listed once, well-formed hashes, and shard sizes that add
    /// up to `total_tokens`.
    pub fn check(&self) -> std::result::Result<(), String> {
        if self.format != FORMAT {
            return Err(format!("format `{}`, expected `{FORMAT}`", self.format));
        }
        self.shard_dtype().map_err(|e| e.to_string())?;
        if self.hook_points.is_empty() || self.d_model == 0 {
            return Err("no hook points or d_model = 0".into());
        }
        let mut names = std::collections::BTreeSet::new();
        let mut sum: usize = 0;
        for s in &self.shards {
            let plain = !s.file.is_empty()
                && s.file != ".."
                && s.file != "."
                && !s.file.contains(['/', '\\', '\0']);
            if !plain {
                return Err(format!("shard file `{}` is not a plain file name", s.file));
            }
            if !names.insert(s.file.as_str()) {
                return Err(format!("shard file `{}` is listed twice", s.file));
            }
            if s.sha256.len() != 64 || !s.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!(
                    "shard `{}`: sha256 `{}` is not 64 hex digits",
                    s.file, s.sha256
                ));
            }
            if s.n_tokens == 0 || s.n_tokens > self.tokens_per_shard {
                return Err(format!(
                    "shard `{}`: {} tokens, expected 1..={} (tokens_per_shard)",
                    s.file, s.n_tokens, self.tokens_per_shard
                ));
            }
            sum = sum.saturating_add(s.n_tokens);
        }
        if sum != self.total_tokens {
            return Err(format!(
                "the shards hold {sum} tokens, total_tokens says {}",
                self.total_tokens
            ));
        }
        Ok(())
    }

    pub fn write(&self, dir: &Path) -> Result<()> {
        let path = dir.join(MANIFEST_FILE);
        let bytes = serde_json::to_vec_pretty(self).map_err(|source| Error::Json {
            path: path.clone(),
            source,
        })?;
        fsutil::atomic_write(&path, &bytes)
    }
}
