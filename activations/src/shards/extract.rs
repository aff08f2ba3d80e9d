//! Extraction: run the model over a corpus and write the hook points' activations into shards.
//!
//! Rows (kept token positions) are numbered in corpus order; shard `s` holds rows
//! `[s * tokens_per_shard, (s + 1) * tokens_per_shard)`. Forward batches always cover the same
//! contexts, so a resumed run computes every shard exactly as an uninterrupted run would.
use super::manifest::{dtype_name, CorpusInfo, Manifest, FORMAT, MANIFEST_FILE};
use super::pipeline::{self, Plan};
use super::shard_file::{self, shard_file_name};
use crate::corpus::{Contexts, Corpus, Split};
use crate::error::{Error, Result};
use crate::gpt2::{Gpt2, HookPoint};
use crate::models::{load_model, parse_device, parse_dtype};
use crate::{fsutil, Gpt2Tokenizer};
use candle_core::DType;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::time::Instant;

fn default_f32() -> String {
    "f32".into()
}
fn default_cpu() -> String {
    "cpu".into()
}
fn default_true() -> bool {
    true
}
fn default_batch() -> usize {
    8
}
fn default_writers() -> usize {
    2
}
fn default_corpus_path() -> String {
    "default".into()
}
fn default_split() -> Split {
    Split::Train
}
fn default_heldout() -> f64 {
    0.1
}

/// `extract`'s TOML config.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtractConfig {
    /// `tiny`, `random:<size>[:seed]`, a model directory or a Hugging Face hub id.
    pub model: String,
    /// dtype the model runs in.
    #[serde(default = "default_f32")]
    pub model_dtype: String,
    /// `cpu`, `cuda` or `cuda:N`.
    #[serde(default = "default_cpu")]
    pub device: String,
    pub out_dir: PathBuf,
    pub hook_points: Vec<HookPoint>,
    /// dtype of the stored activations.
    #[serde(default = "default_f32")]
    pub dtype: String,
    pub tokens_per_shard: usize,
    /// Contexts per forward pass.
    #[serde(default = "default_batch")]
    pub batch_contexts: usize,
    /// Leave out each context's first position (the BOS token).
    #[serde(default = "default_true")]
    pub drop_bos: bool,
    /// Query-chunk length of the causal attention (0: whole sequences; default 256).
    #[serde(default)]
    pub attention_chunk: Option<usize>,
    /// Let f32 matrix products on the GPU use TF32 tensor cores (as PyTorch's `allow_tf32`).
    #[serde(default)]
    pub allow_tf32: bool,
    /// Threads that hash and write shards while the model runs.
    #[serde(default = "default_writers")]
    pub writer_threads: usize,
    pub corpus: ExtractCorpus,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtractCorpus {
    /// `default` (the shipped Shakespeare), a .txt/.jsonl file or a directory.
    #[serde(default = "default_corpus_path")]
    pub path: String,
    /// `train`, `heldout` or `all`.
    #[serde(default = "default_split")]
    pub split: Split,
    #[serde(default = "default_heldout")]
    pub heldout_fraction: f64,
    pub context_len: usize,
    /// Start every context with `<|endoftext|>`.
    #[serde(default = "default_true")]
    pub prepend_bos: bool,
    /// Stop after this many stored tokens.
    #[serde(default)]
    pub max_tokens: Option<usize>,
    /// Cycle through the corpus until `max_tokens` (for benchmarks on a small corpus).
    #[serde(default)]
    pub repeat: bool,
}

impl ExtractConfig {
    pub fn from_toml(text: &str, origin: &Path) -> Result<Self> {
        let cfg: Self = toml::from_str(text)
            .map_err(|e| Error::config(origin.display().to_string(), e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Self::from_toml(&text, path)
    }

    pub fn validate(&self) -> Result<()> {
        parse_dtype("model_dtype", &self.model_dtype)?;
        parse_dtype("dtype", &self.dtype)?;
        let positive = [
            ("tokens_per_shard", self.tokens_per_shard),
            ("batch_contexts", self.batch_contexts),
            ("writer_threads", self.writer_threads),
            ("corpus.context_len", self.corpus.context_len),
        ];
        for (key, v) in positive {
            if v == 0 {
                return Err(Error::config(key, "must be at least 1"));
            }
        }
        if self.hook_points.is_empty() {
            return Err(Error::config(
                "hook_points",
                "at least one hook point is needed",
            ));
        }
        if self.corpus.context_len <= usize::from(self.drop_bos) {
            return Err(Error::config(
                "corpus.context_len",
                "must exceed 1 when drop_bos = true",
            ));
        }
        if !(0.0..1.0).contains(&self.corpus.heldout_fraction) {
            return Err(Error::config(
                "corpus.heldout_fraction",
                "must be in [0, 1)",
            ));
        }
        if self.corpus.repeat && self.corpus.max_tokens.is_none() {
            return Err(Error::config("corpus.repeat", "needs corpus.max_tokens"));
        }
        Ok(())
    }
}

/// Knobs that do not change the output.
#[derive(Debug, Clone, Default)]
pub struct ExtractOptions {
    pub progress: bool,
    /// Stop (without a manifest, as a killed run would) after writing this many new shards.
    pub stop_after_new_shards: Option<usize>,
}

#[derive(Debug, Clone)]
pub struct ExtractReport {
    pub manifest: Manifest,
    pub shards_written: usize,
    pub shards_reused: usize,
    /// Tokens computed (including any recomputed on resume) and the wall time of that work.
    pub tokens_computed: usize,
    pub seconds: f64,
    pub complete: bool,
}

impl ExtractReport {
    pub fn tokens_per_second(&self) -> f64 {
        self.tokens_computed as f64 / self.seconds.max(1e-9)
    }
}

/// A cheap fingerprint of the weights (embeddings of position 0 and all layer-norm gains), so a
/// resumed run refuses to mix shards from different weights.
fn model_fingerprint(model: &Gpt2) -> Result<String> {
    let mut h = Sha256::new();
    for (name, t) in model.named_tensors() {
        if name == "wpe.weight" || name.contains("ln_") {
            let t = if name == "wpe.weight" {
                t.narrow(0, 0, 1)?
            } else {
                t
            };
            let v = t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
            h.update(name.as_bytes());
            h.update(bytemuck::cast_slice::<f32, u8>(&v));
        }
    }
    Ok(hex::encode(h.finalize()))
}

/// Removes temporary files that a killed run left behind.
fn remove_stale_temps(dir: &Path) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        let target = runtime::fs::temp_target(&name).unwrap_or_default();
        if target.starts_with("shard-") || target.starts_with(MANIFEST_FILE) {
            std::fs::remove_file(entry.path()).map_err(|e| Error::io(entry.path(), e))?;
        }
    }
    Ok(())
}

/// Runs (or resumes) an extraction described by `cfg`.
pub fn extract(cfg: &ExtractConfig, opts: &ExtractOptions) -> Result<ExtractReport> {
    cfg.validate()?;
    let model_dtype = parse_dtype("model_dtype", &cfg.model_dtype)?;
    let dtype = parse_dtype("dtype", &cfg.dtype)?;
    let device = parse_device(&cfg.device)?;
    candle_core::cuda::set_gemm_reduced_precision_f32(cfg.allow_tf32);
    let mut model = load_model(&cfg.model, model_dtype, &device)?;
    if let Some(chunk) = cfg.attention_chunk {
        model.set_attention_chunk(Some(chunk));
    }
    let mcfg = model.config().clone();
    for h in &cfg.hook_points {
        h.validate(mcfg.n_layer)
            .map_err(|e| Error::config("hook_points", e.to_string()))?;
    }
    let t = cfg.corpus.context_len;
    if t > mcfg.n_positions {
        return Err(Error::config(
            "corpus.context_len",
            format!("{t} exceeds the model's n_positions {}", mcfg.n_positions),
        ));
    }

    let corpus =
        Corpus::load(&cfg.corpus.path)?.split(cfg.corpus.split, cfg.corpus.heldout_fraction);
    let stream = corpus.tokenize(&Gpt2Tokenizer::new()?)?;
    let contexts = Contexts::pack(&stream, t, cfg.corpus.prepend_bos)?;
    if contexts.is_empty() {
        return Err(Error::config(
            "corpus",
            format!(
                "`{}` gives no complete context of {t} tokens",
                cfg.corpus.path
            ),
        ));
    }
    let kept = t - usize::from(cfg.drop_bos);
    let available = contexts.len() * kept;
    let total = match cfg.corpus.max_tokens {
        Some(m) if cfg.corpus.repeat => m,
        Some(m) => m.min(available),
        None => available,
    };
    let per_shard = cfg.tokens_per_shard;
    let n_shards = total.div_ceil(per_shard);

    let corpus_info = CorpusInfo {
        spec: cfg.corpus.path.clone(),
        split: cfg.corpus.split,
        heldout_fraction: cfg.corpus.heldout_fraction,
        fingerprint: corpus.fingerprint(),
        documents: corpus.documents.len(),
    };
    let decisive = serde_json::json!({
        "model": cfg.model, "model_dtype": cfg.model_dtype, "weights": model_fingerprint(&model)?,
        "device": if device.is_cpu() { "cpu" } else { "cuda" }, "hooks": cfg.hook_points,
        "dtype": cfg.dtype, "tokens_per_shard": per_shard, "batch_contexts": cfg.batch_contexts,
        "drop_bos": cfg.drop_bos, "attention_chunk": cfg.attention_chunk, "tf32": cfg.allow_tf32, "context_len": t, "prepend_bos": cfg.corpus.prepend_bos,
        "total": total, "corpus": corpus_info,
    });
    let fingerprint = hex::encode(Sha256::digest(decisive.to_string().as_bytes()));
    let mut manifest = Manifest {
        format: FORMAT.into(),
        model: cfg.model.clone(),
        model_config: mcfg.clone(),
        model_dtype: dtype_name(model_dtype).into(),
        hook_points: cfg.hook_points.clone(),
        d_model: mcfg.n_embd,
        dtype: dtype_name(dtype).into(),
        context_len: t,
        prepend_bos: cfg.corpus.prepend_bos,
        drop_bos: cfg.drop_bos,
        tokens_per_shard: per_shard,
        total_tokens: total,
        corpus: corpus_info,
        fingerprint: fingerprint.clone(),
        shards: Vec::new(),
    };

    // What a previous run left.
    let dir = cfg.out_dir.as_path();
    fsutil::create_dir_all(dir)?;
    remove_stale_temps(dir)?;
    if dir.join(MANIFEST_FILE).is_file() {
        let old = Manifest::read(dir)?;
        if old.fingerprint != fingerprint {
            return Err(Error::shard(
                dir.join(MANIFEST_FILE),
                "the output directory holds a different extraction (other model, corpus or \
                 settings); choose another out_dir or delete it",
            ));
        }
    }
    let mut done = vec![false; n_shards];
    for (s, d) in done.iter_mut().enumerate() {
        let path = dir.join(shard_file_name(s));
        if path.is_file() {
            let meta = shard_file::read_meta(&path)?;
            if meta.fingerprint != fingerprint || meta.index != s {
                return Err(Error::shard(
                    &path,
                    "belongs to a different extraction; choose another out_dir or delete it",
                ));
            }
            *d = true;
        }
    }
    let reused = done.iter().filter(|d| **d).count();

    let progress = if opts.progress {
        indicatif::ProgressBar::new(total as u64)
    } else {
        indicatif::ProgressBar::hidden()
    };
    progress.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {human_pos}/{human_len} tokens  {per_sec}  ETA {eta}",
        )
        .map_err(|e| Error::config("progress", e.to_string()))?,
    );
    let plan = Plan {
        dir,
        fingerprint,
        hooks: &cfg.hook_points,
        dtype,
        d_model: mcfg.n_embd,
        context_len: t,
        batch_contexts: cfg.batch_contexts,
        drop_bos: cfg.drop_bos,
        tokens_per_shard: per_shard,
        total_tokens: total,
        writer_threads: cfg.writer_threads,
        done,
    };
    let started = Instant::now();
    let outcome = pipeline::run(
        &plan,
        &model,
        &contexts,
        opts.stop_after_new_shards,
        &progress,
    )?;
    if outcome.complete {
        progress.finish();
    } else {
        progress.abandon();
    }
    let seconds = started.elapsed().as_secs_f64();
    if outcome.complete {
        manifest.shards = outcome.shards;
        manifest.write(dir)?;
    }
    Ok(ExtractReport {
        manifest,
        shards_written: outcome.written,
        shards_reused: reused,
        tokens_computed: outcome.tokens_computed,
        seconds,
        complete: outcome.complete,
    })
}
