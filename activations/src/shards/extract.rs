//! Extraction: run the model over a corpus and write the hook points' activations into shards.
//!
//! Rows (kept token positions) are numbered in corpus order; shard `s` holds rows
//! `[s * tokens_per_shard, (s + 1) * tokens_per_shard)`. Forward batches always cover the same
//! contexts, so a resumed run computes every shard exactly as an uninterrupted run would.
use super::manifest::ShardInfo;
use super::manifest::{dtype_name, CorpusInfo, Manifest, FORMAT, MANIFEST_FILE};
use super::pipeline::{self, Plan};
use super::shard_file::{self, shard_file_name, st_dtype_name, ShardLayout, ShardMeta};
use crate::corpus::{CorpusSource, CorpusSpec, PackOptions, Split};
use crate::error::{Error, Result};
use crate::{fsutil, models::load_model_to};
use candle_core::DType;
use gpt2::HookPoint;
use models::{Depth, Model};
use runtime::device::{candle_dtype, open_device};
use runtime::{config::ConfigSource, config::DeviceSpec, config::Dtype};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::time::Instant;

fn default_true() -> bool {
    true
}
fn default_batch() -> usize {
    8
}
fn default_writers() -> usize {
    2
}
fn default_corpus() -> String {
    "default".into()
}
fn default_split() -> Split {
    Split::Train
}
fn default_held_out() -> f64 {
    crate::corpus::DEFAULT_HELD_OUT_FRACTION
}

/// Keys renamed when the commands' configs took one vocabulary (old → new); the whole `[corpus]`
/// section became `[data]`.
pub const RENAMED: &[(&str, &str)] = &[
    ("corpus.path", "data.corpus"),
    ("corpus.context_len", "data.context"),
    ("corpus.heldout_fraction", "data.held_out_fraction"),
    ("corpus.split", "data.split"),
    ("corpus.prepend_bos", "data.prepend_bos"),
    ("corpus.max_tokens", "data.max_tokens"),
    ("corpus.repeat", "data.repeat"),
    ("corpus", "data"),
    ("model.device", "device"),
    ("data.eval_fraction", "data.held_out_fraction"),
];

/// The config of `extract`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtractConfig {
    /// `tiny`, `random:<size>[:seed]`, a model directory or a Hugging Face hub id.
    pub model: String,
    /// dtype the model runs in.
    #[serde(default)]
    pub model_dtype: Dtype,
    /// `cpu`, `cuda` or `cuda:N`.
    #[serde(default)]
    pub device: DeviceSpec,
    /// The directory the shards and manifest.json are written to (`--out` overrides it).
    pub out_dir: PathBuf,
    /// Where activations are read, e.g. `blocks.2.hook_resid_post`, `resid_pre.0`, `ln_final`.
    #[schemars(with = "Vec<String>")]
    pub hook_points: Vec<HookPoint>,
    /// dtype of the stored activations.
    #[serde(default)]
    pub dtype: Dtype,
    /// Stored tokens per shard file.
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
    /// The corpus and how it is cut into contexts.
    pub data: ExtractData,
}

/// `[data]`: the corpus and how it is cut into contexts, with the keys train-sae and finetune use.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtractData {
    /// `default` (the shipped Shakespeare), a .txt / .jsonl / .jsonl.gz / .jsonl.zst / .parquet
    /// file, a directory of them, or a hub dataset `hf:OWNER/NAME[/SUBDIR][@REVISION]`.
    #[serde(default = "default_corpus")]
    pub corpus: String,
    /// The column (JSON field) holding the text; default `text`.
    #[serde(default)]
    pub text_column: Option<String>,
    /// A column of token ids (a list of integers per row) used as they are, instead of text.
    #[serde(default)]
    pub token_column: Option<String>,
    /// `train`, `heldout` or `all`.
    #[serde(default = "default_split")]
    pub split: Split,
    /// Fraction of the documents in the held-out split.
    #[serde(default = "default_held_out")]
    pub held_out_fraction: f64,
    /// Tokens per context.
    pub context: usize,
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

impl ExtractData {
    /// The corpus and its columns, as [`CorpusSource::open`] takes them.
    pub fn spec(&self) -> CorpusSpec {
        CorpusSpec {
            corpus: self.corpus.clone(),
            text_column: self.text_column.clone(),
            token_column: self.token_column.clone(),
        }
    }
}

impl ExtractConfig {
    pub fn from_toml(text: &str, origin: &Path) -> Result<Self> {
        Self::from_source(&ConfigSource::from_text(origin, text.into(), &[])?)
    }

    pub fn from_file(path: &Path) -> Result<Self> {
        Self::load(path, &[])
    }

    /// Reads `path` and applies `--set section.key=value` overrides before checking it.
    pub fn load(path: &Path, overrides: &[String]) -> Result<Self> {
        Self::from_source(&ConfigSource::load(path, overrides)?)
    }

    pub fn from_source(source: &ConfigSource) -> Result<Self> {
        let cfg: Self = source.parse(RENAMED).map_err(|e| match e {
            runtime::Error::Config { key, message } => Error::Config { key, message },
            // A parse error names the file and line, an override error the `--set` itself.
            other => Error::Runtime(other),
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<()> {
        let positive = [
            ("tokens_per_shard", self.tokens_per_shard),
            ("batch_contexts", self.batch_contexts),
            ("writer_threads", self.writer_threads),
            ("data.context", self.data.context),
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
        if self.data.context <= usize::from(self.drop_bos) {
            return Err(Error::config(
                "data.context",
                "must exceed 1 when drop_bos = true",
            ));
        }
        if !(0.0..1.0).contains(&self.data.held_out_fraction) {
            return Err(Error::config("data.held_out_fraction", "must be in [0, 1)"));
        }
        if self.data.repeat && self.data.max_tokens.is_none() {
            return Err(Error::config("data.repeat", "needs data.max_tokens"));
        }
        Ok(())
    }
}

/// Knobs that do not change the output.
#[derive(Debug, Clone, Default)]
pub struct ExtractOptions {
    pub progress: bool,
    /// Stop after the shard being cut when this is requested (SIGINT / SIGTERM in the binary); the
    /// report then says `complete: false` and a rerun continues.
    pub stop: runtime::signal::StopSignal,
    /// Stop (without a manifest, as a killed run would) after writing this many new shards.
    pub stop_after_new_shards: Option<usize>,
}

#[derive(Debug, Clone)]
pub struct ExtractReport {
    pub manifest: Manifest,
    pub shards_written: usize,
    pub shards_reused: usize,
    /// Shards an earlier run left that failed their check (sha256 against the manifest, or their header)
    /// and were computed again.
    pub shards_remade: Vec<String>,
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

/// A cheap fingerprint of the weights (GPT-2: embeddings of position 0 and all layer-norm gains;
/// other families: the embedding of token 0), so a resumed run refuses to mix shards from different
/// weights.
fn model_fingerprint(model: &Model) -> Result<String> {
    let mut h = Sha256::new();
    let Some(gpt2) = model.as_gpt2() else {
        let row = model.embedding().narrow(0, 0, 1)?;
        let v = row.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        h.update(model.model_type().as_bytes());
        h.update(bytemuck::cast_slice::<f32, u8>(&v));
        return Ok(hex::encode(h.finalize()));
    };
    for (name, t) in gpt2.named_tensors() {
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

/// A shard file an earlier run may have left.
enum Existing {
    Missing,
    /// Checked: reused as it is.
    Good(ShardInfo),
    /// Corrupt or truncated: to be computed again.
    Bad(String),
}

/// Checks, in parallel, every shard file an earlier run left in `dir`: its header must describe the
/// shard this run would write (a shard of another extraction is an error, not something to overwrite),
/// and its sha256 must match the manifest's where a finished run wrote one. Only files whose header
/// parses as this extraction's are hashed.
fn check_existing_shards(
    dir: &Path,
    n_shards: usize,
    manifest: Option<&Manifest>,
    expected: &(dyn Fn(usize) -> ShardLayout + Sync),
) -> Result<Vec<Existing>> {
    use rayon::prelude::*;
    (0..n_shards)
        .into_par_iter()
        .map(|s| {
            let file = shard_file_name(s);
            let path = dir.join(&file);
            if !path.is_file() {
                return Ok(Existing::Missing);
            }
            let want = expected(s);
            let layout = match shard_file::read_layout(&path) {
                Ok(layout) => layout,
                Err(Error::Shard { message, .. }) => return Ok(Existing::Bad(message)),
                Err(e) => return Err(e),
            };
            if layout.meta != want.meta {
                return Err(Error::shard(
                    &path,
                    "belongs to a different extraction; choose another out_dir or delete it",
                ));
            }
            if layout != want {
                return Ok(Existing::Bad(format!(
                    "holds {} {:?}, expected {} {:?}",
                    layout.dtype, layout.shape, want.dtype, want.shape
                )));
            }
            let sha256 = shard_file::sha256_file(&path)?;
            let listed = manifest.and_then(|m| m.shards.iter().find(|i| i.file == file));
            if let Some(listed) = listed {
                if listed.sha256 != sha256 {
                    return Ok(Existing::Bad(format!(
                        "sha256 {sha256} differs from the manifest's {}",
                        listed.sha256
                    )));
                }
            }
            Ok(Existing::Good(ShardInfo {
                file,
                n_tokens: want.shape[0],
                sha256,
            }))
        })
        .collect()
}

/// Runs (or resumes) an extraction described by `cfg`.
pub fn extract(cfg: &ExtractConfig, opts: &ExtractOptions) -> Result<ExtractReport> {
    cfg.validate()?;
    let model_dtype = candle_dtype(cfg.model_dtype);
    let dtype = candle_dtype(cfg.dtype);
    let device = open_device("device", cfg.device)?;
    candle_core::cuda::set_gemm_reduced_precision_f32(cfg.allow_tf32);
    // Hashed beside the model loading (a multi-GB weights file takes seconds).
    let hashing = {
        let spec = cfg.model.clone();
        std::thread::spawn(move || crate::models::weights_identity(&spec))
    };
    let depth = Depth::for_hooks(&cfg.hook_points, false);
    let mut model = load_model_to(&cfg.model, model_dtype, &device, depth)?;
    let model_sha256 = hashing
        .join()
        .map_err(|_| Error::config("model", "hashing the weights failed"))??;
    if let (Some(chunk), Some(gpt2)) = (cfg.attention_chunk, model.as_gpt2_mut()) {
        gpt2.set_attention_chunk(Some(chunk));
    }
    let model_config = model.config_json();
    let d_model = model.d_model();
    for h in &cfg.hook_points {
        h.validate(model.n_layer())
            .map_err(|e| Error::config("hook_points", e.to_string()))?;
    }
    let t = cfg.data.context;
    model
        .check_context(t)
        .map_err(|message| Error::config("data.context", message))?;

    let source = CorpusSource::open(&cfg.data.spec())?;
    if let Some(note) = source.detection_note() {
        eprintln!("{note}");
    }
    let kept = t - usize::from(cfg.drop_bos);
    // A streamed corpus is read only as far as `max_tokens` needs.
    let needed = cfg
        .data
        .max_tokens
        .filter(|_| source.is_streamed())
        .map(|m| m.div_ceil(kept));
    if source.is_streamed() && needed.is_none() {
        return Err(Error::config(
            "data.max_tokens",
            format!(
                "`{}` is streamed: say how many tokens to extract",
                cfg.data.corpus
            ),
        ));
    }
    let pack = PackOptions {
        tokenizer: crate::Tokenizer::for_model(&cfg.model)?,
        split: cfg.data.split,
        heldout_fraction: cfg.data.held_out_fraction,
        context_len: t,
        prepend_bos: cfg.data.prepend_bos,
    };
    let contexts = source.contexts(pack, needed)?;
    if contexts.is_empty() {
        return Err(Error::config(
            "data.corpus",
            format!(
                "`{}` gives no complete context of {t} tokens",
                cfg.data.corpus
            ),
        ));
    }
    let available = contexts.len() * kept;
    let total = match cfg.data.max_tokens {
        Some(m) if cfg.data.repeat => m,
        Some(m) => m.min(available),
        None => available,
    };
    let per_shard = cfg.tokens_per_shard;
    let n_shards = total.div_ceil(per_shard);

    let corpus_info = CorpusInfo {
        spec: cfg.data.corpus.clone(),
        split: cfg.data.split,
        heldout_fraction: cfg.data.held_out_fraction,
        fingerprint: source.fingerprint(cfg.data.split, cfg.data.held_out_fraction)?,
        documents: source
            .documents(cfg.data.split, cfg.data.held_out_fraction)
            .unwrap_or(0),
    };
    let decisive = serde_json::json!({
        "model": cfg.model, "model_dtype": cfg.model_dtype.name(), "weights": model_fingerprint(&model)?,
        "device": if device.is_cpu() { "cpu" } else { "cuda" }, "hooks": cfg.hook_points,
        "dtype": cfg.dtype.name(), "tokens_per_shard": per_shard, "batch_contexts": cfg.batch_contexts,
        "drop_bos": cfg.drop_bos, "attention_chunk": cfg.attention_chunk, "tf32": cfg.allow_tf32, "context_len": t, "prepend_bos": cfg.data.prepend_bos,
        "total": total, "corpus": corpus_info,
    });
    let fingerprint = hex::encode(Sha256::digest(decisive.to_string().as_bytes()));
    let mut manifest = Manifest {
        format: FORMAT.into(),
        model: cfg.model.clone(),
        model_config: model_config.clone(),
        model_dtype: dtype_name(model_dtype).into(),
        hook_points: cfg.hook_points.clone(),
        d_model,
        dtype: dtype_name(dtype).into(),
        context_len: t,
        prepend_bos: cfg.data.prepend_bos,
        drop_bos: cfg.drop_bos,
        tokens_per_shard: per_shard,
        total_tokens: total,
        corpus: corpus_info,
        fingerprint: fingerprint.clone(),
        shards: Vec::new(),
        model_sha256: Some(model_sha256),
    };

    // What a previous run left.
    let dir = cfg.out_dir.as_path();
    fsutil::create_dir_all(dir)?;
    // One extraction per directory for the whole run; the lock names the process holding it.
    let _lock = runtime::lock::DirLock::acquire(dir)?;
    remove_stale_temps(dir)?;
    let old_manifest = if dir.join(MANIFEST_FILE).is_file() {
        let old = Manifest::read(dir)?;
        if old.fingerprint != fingerprint {
            return Err(Error::shard(
                dir.join(MANIFEST_FILE),
                "the output directory holds a different extraction (other model, corpus or \
                 settings); choose another out_dir or delete it",
            ));
        }
        Some(old)
    } else {
        None
    };
    let expected = |s: usize| ShardLayout {
        meta: ShardMeta {
            fingerprint: fingerprint.clone(),
            index: s,
        },
        dtype: st_dtype_name(dtype).into(),
        shape: [
            per_shard.min(total - s * per_shard),
            cfg.hook_points.len(),
            d_model,
        ],
    };
    let checked = check_existing_shards(dir, n_shards, old_manifest.as_ref(), &expected)?;
    let mut done = vec![false; n_shards];
    let mut reused_shards = Vec::new();
    let mut remade = Vec::new();
    for (s, check) in checked.into_iter().enumerate() {
        match check {
            Existing::Missing => {}
            Existing::Good(info) => {
                done[s] = true;
                reused_shards.push(info);
            }
            Existing::Bad(reason) => {
                let path = dir.join(shard_file_name(s));
                tracing::warn!("{}: {reason}; re-making it", path.display());
                eprintln!("{}: {reason}; re-making it", path.display());
                std::fs::remove_file(&path).map_err(|e| Error::file("removing", &path, e))?;
                remade.push(shard_file_name(s));
            }
        }
    }
    let reused = reused_shards.len();

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
        d_model,
        context_len: t,
        batch_contexts: cfg.batch_contexts,
        drop_bos: cfg.drop_bos,
        tokens_per_shard: per_shard,
        total_tokens: total,
        writer_threads: cfg.writer_threads,
        done,
        reused: reused_shards,
    };
    let started = Instant::now();
    let outcome = pipeline::run(
        &plan,
        &model,
        &contexts,
        opts.stop_after_new_shards,
        &opts.stop,
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
        shards_remade: remade,
        tokens_computed: outcome.tokens_computed,
        seconds,
        complete: outcome.complete,
    })
}
