//! The TOML configuration of `train-sae`. Every key is known (unknown keys are errors) and every value is
//! checked; an error names the dotted key.
use crate::{Error, Result};
use gpt2::HookPoint;
use runtime::{config::ConfigSource, config::DeviceSpec, config::Dtype};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use harness::SelectorConfig;
use std::path::{Path, PathBuf};

/// Keys of the other commands' old vocabulary, refused with the name this config uses.
pub const RENAMED: &[(&str, &str)] = &[
    ("model.device", "device"),
    ("train.batch", "train.batch_size"),
    ("data.batch", "train.batch_size"),
    ("train.lr_warmup_steps", "train.warmup_steps"),
    ("data.model_dtype", "data.dtype"),
    ("corpus.path", "data.corpus"),
    ("corpus.context_len", "data.context"),
    ("corpus.heldout_fraction", "data.held_out_fraction"),
    ("data.eval_fraction", "data.held_out_fraction"),
    ("train.adam_eps", "train.eps"),
];

/// The config of `train-sae`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Run name: the default run directory is `runs/<name>-<selector>-<timestamp>`.
    pub name: String,
    /// Seeds the SAE's initialisation, the data order and the synthetic data.
    #[serde(default)]
    pub seed: u64,
    /// `cpu`, `cuda` or `cuda:N` (`cuda` is `cuda:0`).
    #[serde(default)]
    pub device: DeviceSpec,
    /// Where the activations come from: `source = "model"`, `"shards"` or `"synthetic"`.
    pub data: DataConfig,
    /// The autoencoder.
    pub sae: SaeConfig,
    /// The optimization.
    pub train: TrainConfig,
    /// The selector of every step and the in-run check against a second one.
    #[serde(default)]
    pub selector: SelectorConfig,
    /// Logging, the progress bar and Weights & Biases.
    #[serde(default)]
    pub log: harness::LogConfig,
    /// The final evaluation.
    #[serde(default)]
    pub eval: EvalConfig,
    /// Training over several GPUs, one process per GPU (`mode = "data"`: each rank steps on its
    /// rows of the global batch `train.batch_size`).
    #[serde(default)]
    pub distributed: collective::DistributedConfig,
}

/// The residual-stream hook point an SAE reads at each of `data.layers`.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Hook {
    /// The stream entering the block.
    ResidPre,
    /// The stream leaving the block.
    #[default]
    ResidPost,
    /// Attention's output as added to the stream (`blocks.L.hook_attn_out`; not GPT-2).
    AttnOut,
    /// The MLP's output as added to the stream (`blocks.L.hook_mlp_out`; not GPT-2).
    MlpOut,
    /// The MLP's normalized input (`blocks.L.ln2.hook_normalized`; not GPT-2).
    MlpIn,
}

impl std::fmt::Display for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Hook::ResidPre => "resid_pre",
            Hook::ResidPost => "resid_post",
            Hook::AttnOut => "attn_out",
            Hook::MlpOut => "mlp_out",
            Hook::MlpIn => "mlp_in",
        })
    }
}

impl Hook {
    pub fn at(self, layer: usize) -> HookPoint {
        match self {
            Hook::ResidPre => HookPoint::ResidPre(layer),
            Hook::ResidPost => HookPoint::ResidPost(layer),
            Hook::AttnOut => HookPoint::AttnOut(layer),
            Hook::MlpOut => HookPoint::MlpOut(layer),
            Hook::MlpIn => HookPoint::MlpIn(layer),
        }
    }
}

/// Where the activations come from.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(tag = "source", rename_all = "lowercase", deny_unknown_fields)]
pub enum DataConfig {
    /// Run a model on a corpus and train on its activations as they are produced.
    Model {
        /// "tiny" (the embedded default model), `random:SHAPE`, or a model directory / Hugging Face id
        /// of any supported family (GPT-2, Llama, Qwen 2/3, Mistral, Gemma 2, GPT-NeoX).
        model: String,
        /// Where in each layer the activations are read.
        #[serde(default)]
        hook: Hook,
        /// One layer for an SAE, several for a crosscoder.
        layers: Vec<usize>,
        /// "default" (the shipped corpus), a .txt / .jsonl / .jsonl.gz / .jsonl.zst / .parquet file, a
        /// directory of them, or a hub dataset "hf:OWNER/NAME[/SUBDIR][@REVISION]" (docs/corpora.md).
        #[serde(default = "default_corpus")]
        corpus: String,
        /// The column (JSON field) holding the text; default "text".
        #[serde(default)]
        text_column: Option<String>,
        /// A column of token ids (a list of integers per row) used as they are, instead of text.
        #[serde(default)]
        token_column: Option<String>,
        /// Tokens per context the model runs on (its first position, BOS, is not trained on).
        #[serde(default = "default_context")]
        context: usize,
        /// Fraction of the corpus' documents held out from training: the held-out evaluation and
        /// the feature dashboards read them.
        #[serde(default = "default_held_out_fraction")]
        held_out_fraction: f64,
        /// Activation dtype of the model forward.
        #[serde(default)]
        dtype: Dtype,
        /// Tokens held out for the final evaluation (taken from the corpus' held-out split).
        #[serde(default = "default_held_out")]
        held_out_tokens: usize,
        /// Activations buffered and shuffled before training draws batches.
        #[serde(default = "default_buffer")]
        buffer_tokens: usize,
        /// Visit the corpus' contexts in a random order, reshuffled every epoch (false: corpus order).
        #[serde(default = "default_true")]
        shuffle_contexts: bool,
        /// Forward batches run ahead of training on a producer thread; 0 runs the model inline.
        #[serde(default = "default_model_prefetch")]
        prefetch: usize,
    },
    /// Activation shards written by `extract`.
    Shards {
        /// The directory `extract` wrote (its manifest.json names the model and hook points).
        dir: PathBuf,
        /// Activations buffered and shuffled before training draws batches.
        #[serde(default = "default_buffer")]
        buffer_tokens: usize,
        /// Shards of held-out tokens for the final FVU / L0 (optional).
        #[serde(default)]
        held_out_dir: Option<PathBuf>,
        /// Shards read together whose context-sized blocks are dealt out in one random order (host
        /// memory: twice this many shards).
        #[serde(default = "default_mix_shards")]
        mix_shards: usize,
        /// Chunks of rows read, checked and uploaded ahead of training; 0 reads inline.
        #[serde(default = "default_shard_prefetch")]
        prefetch: usize,
    },
    /// Sparse combinations of random unit features: a known ground truth, for tests and benchmarks.
    Synthetic {
        /// Width of each activation vector.
        d_model: usize,
        /// Layers per token (a crosscoder reads several).
        #[serde(default = "default_layers_one")]
        layers: usize,
        /// Ground-truth features the activations are drawn from.
        features: usize,
        /// Features active in each token.
        active_per_token: usize,
        /// Tokens drawn for the final evaluation (0: none).
        #[serde(default = "default_held_out")]
        held_out_tokens: usize,
    },
}

impl DataConfig {
    /// The corpus a model-backed source reads, as every command opens it.
    pub fn corpus_spec(&self) -> Option<activations::corpus::CorpusSpec> {
        match self {
            DataConfig::Model {
                corpus,
                text_column,
                token_column,
                ..
            } => Some(activations::corpus::CorpusSpec {
                corpus: corpus.clone(),
                text_column: text_column.clone(),
                token_column: token_column.clone(),
            }),
            _ => None,
        }
    }
}

fn default_corpus() -> String {
    "default".into()
}
fn default_context() -> usize {
    128
}
fn default_held_out() -> usize {
    8192
}
fn default_held_out_fraction() -> f64 {
    activations::corpus::DEFAULT_HELD_OUT_FRACTION
}
fn default_true() -> bool {
    true
}
fn default_model_prefetch() -> usize {
    2
}
fn default_mix_shards() -> usize {
    4
}
fn default_shard_prefetch() -> usize {
    4
}
fn default_buffer() -> usize {
    1 << 16
}
fn default_layers_one() -> usize {
    1
}

/// The SAE architecture.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// The batch keeps its B·k largest pre-activations (Bussmann et al.).
    #[default]
    Batchtopk,
    /// BatchTopK whose nested prefixes of latents (`group_sizes`) each reconstruct the input.
    Matryoshka,
    /// One dictionary over several layers (`data.layers`), read from and written to each.
    Crosscoder,
}

/// How the decoder consumes the selection.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DecodeMode {
    /// The sparse form (faster on both devices).
    #[default]
    Auto,
    /// From the (index, value) pairs.
    Sparse,
    /// Dense B×n activation matrix times W_dec.
    Dense,
}

/// `[sae]`: the autoencoder.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SaeConfig {
    /// The architecture.
    #[serde(default)]
    pub arch: Arch,
    /// Dictionary size n.
    pub latents: usize,
    /// Mean active latents per token; the batch keeps B·k.
    pub k: usize,
    /// Matryoshka: sizes of the nested groups, summing to `latents`.
    #[serde(default)]
    pub group_sizes: Vec<usize>,
    /// Scale inputs to unit mean squared norm while training; folded back into the saved weights.
    #[serde(default = "yes")]
    pub normalize_input: bool,
    /// How the decoder consumes the selection.
    #[serde(default)]
    pub decode: DecodeMode,
    /// The aux-k loss that revives dead latents.
    #[serde(default)]
    pub aux: AuxConfig,
    /// The inference threshold saved with the SAE.
    #[serde(default)]
    pub threshold: ThresholdConfig,
}

fn yes() -> bool {
    true
}

/// Aux-k loss: dead latents reconstruct the residual error.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuxConfig {
    /// Latents kept per token among the dead ones; 0 means d_model / 2.
    #[serde(default)]
    pub k_aux: usize,
    /// Weight of the aux-k loss in the total loss.
    #[serde(default = "default_aux_coef")]
    pub coefficient: f64,
    /// A latent that has not fired for this many tokens is dead.
    #[serde(default = "default_dead_tokens")]
    pub dead_tokens: u64,
    /// How the aux-k loss is computed over the dead latents.
    #[serde(default, deserialize_with = "aux_decode")]
    #[schemars(with = "AuxDecode")]
    pub decode: AuxDecode,
}

/// The two forms of the aux-k loss; both compute the same function.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AuxDecode {
    /// Per step, the cheaper of the two by a cost estimate (bytes of the pair passes against the flops of
    /// the matmuls over the dead columns).
    #[default]
    Auto,
    /// Through the B·k_aux selected (index, value) pairs, one W row read per pair and pass.
    Sparse,
    /// Matmuls over the dead columns only: cost ∝ B·|dead|·d, whatever k_aux.
    Dense,
}

/// `sae.aux.decode`, with an error that names the key.
fn aux_decode<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<AuxDecode, D::Error> {
    let text = String::deserialize(d)?;
    serde_json::from_value(serde_json::Value::String(text.clone())).map_err(|_| {
        serde::de::Error::custom(format!(
            "sae.aux.decode: \"{text}\" is not one of \"auto\", \"sparse\", \"dense\""
        ))
    })
}

fn default_aux_coef() -> f64 {
    1.0 / 32.0
}
fn default_dead_tokens() -> u64 {
    10_000_000
}

impl Default for AuxConfig {
    fn default() -> Self {
        Self {
            k_aux: 0,
            coefficient: default_aux_coef(),
            dead_tokens: default_dead_tokens(),
            decode: AuxDecode::Auto,
        }
    }
}

/// Inference threshold: EMA of the smallest kept activation.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThresholdConfig {
    /// EMA decay per step, in [0, 1).
    #[serde(default = "default_beta")]
    pub beta: f64,
    /// The step the EMA starts at.
    #[serde(default)]
    pub start_step: u64,
}

fn default_beta() -> f64 {
    0.999
}

impl Default for ThresholdConfig {
    fn default() -> Self {
        Self {
            beta: default_beta(),
            start_step: 0,
        }
    }
}

/// Matmul precision on CUDA (CPU always computes in f32).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// Full f32.
    #[default]
    F32,
    /// TF32 tensor cores for f32 matmuls.
    Tf32,
    /// bf16 matmuls.
    Bf16,
}

/// Storage dtype of Adam's moments.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Moments {
    /// The plain update.
    #[default]
    F32,
    /// Rounded to nearest after each update, which is computed in f32 from the unrounded new moments:
    /// the optimizer moves 20 bytes per parameter instead of 28.
    Bf16,
}

impl Moments {
    pub fn dtype(self) -> candle_core::DType {
        match self {
            Moments::F32 => candle_core::DType::F32,
            Moments::Bf16 => candle_core::DType::BF16,
        }
    }
}

/// `[train]`: the optimization.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    /// Tokens per step B.
    pub batch_size: usize,
    /// Optimization steps of the whole run.
    pub steps: u64,
    /// Adam learning rate; 0 picks 2e-4 / sqrt(n / 2^14), dictionary_learning's rule.
    #[serde(default)]
    pub lr: f64,
    /// Adam's first-moment decay.
    #[serde(default = "default_beta1")]
    pub beta1: f64,
    /// Adam's second-moment decay.
    #[serde(default = "default_beta2")]
    pub beta2: f64,
    /// Adam's epsilon, added to the root of the second moment.
    #[serde(default = "default_eps")]
    pub eps: f64,
    /// Linear learning-rate warm-up from 0 over this many steps.
    #[serde(default)]
    pub warmup_steps: u64,
    /// Linear decay to 0 starts at this fraction of the steps (1.0 = no decay).
    #[serde(default = "default_decay_start")]
    pub decay_start: f64,
    /// Global gradient-norm clip; 0 disables it.
    #[serde(default = "default_clip")]
    pub grad_clip: f64,
    #[serde(default)]
    pub precision: Precision,
    /// Storage of Adam's first and second moments (computed in f32 either way).
    #[serde(default)]
    pub moments: Moments,
    /// Checkpoint every this many steps (0: only at the end and on Ctrl-C).
    #[serde(default)]
    pub checkpoint_every: u64,
    /// Checkpoints kept in `checkpoints/`: the newest N (0 keeps all).
    #[serde(default = "default_keep_checkpoints")]
    pub keep_checkpoints: usize,
    /// Wait for the device after each stage of every step and log the stage times (`stage_*_ms`);
    /// slows the step, for finding where its time goes.
    #[serde(default)]
    pub profile_stages: bool,
}

fn default_beta1() -> f64 {
    0.9
}
fn default_beta2() -> f64 {
    0.999
}
fn default_eps() -> f64 {
    1e-8
}
fn default_keep_checkpoints() -> usize {
    harness::train_loop::DEFAULT_KEEP_CHECKPOINTS
}
fn default_decay_start() -> f64 {
    0.8
}
fn default_clip() -> f64 {
    1.0
}

/// `[eval]`: the final evaluation.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EvalConfig {
    /// Run the final evaluation (held-out FVU, L0, CE-loss recovered where a model is available).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Contexts of the held-out split used for CE-loss recovered.
    #[serde(default = "default_ce_contexts")]
    pub ce_contexts: usize,
}

fn default_ce_contexts() -> usize {
    8
}

impl Default for EvalConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            ce_contexts: default_ce_contexts(),
        }
    }
}

/// The fewest held-out tokens FVU is measured on: its denominator is their variance, which a handful of
/// tokens does not estimate (one token has none, and the FVU comes out astronomically large).
pub const MIN_HELD_OUT_TOKENS: usize = 64;

/// `held_out_tokens` is 0 (no held-out evaluation) or large enough to measure.
fn check_held_out(held_out_tokens: usize) -> Result<()> {
    if held_out_tokens != 0 && held_out_tokens < MIN_HELD_OUT_TOKENS {
        return Err(Error::config(
            "data.held_out_tokens",
            format!(
                "{held_out_tokens} is too few to measure FVU on; valid: 0 (skip the held-out \
                 evaluation) or ≥ {MIN_HELD_OUT_TOKENS}"
            ),
        ));
    }
    Ok(())
}

impl Config {
    pub fn from_path(path: &Path) -> Result<Self> {
        Ok(Self::load(path, &[])?.0)
    }

    /// Reads `path`, applies `--set` overrides and validates; also returns the source, which the run
    /// directory records.
    pub fn load(path: &Path, overrides: &[String]) -> Result<(Self, ConfigSource)> {
        let source = ConfigSource::load(path, overrides)?;
        let cfg = Self::from_source(&source)?;
        Ok((cfg, source))
    }

    pub fn from_toml(text: &str) -> Result<Self> {
        Self::from_source(&ConfigSource::inline(text)?)
    }

    fn from_source(source: &ConfigSource) -> Result<Self> {
        let cfg: Config = source.parse(RENAMED).map_err(|e| match e {
            runtime::Error::Parse {
                path,
                line,
                message,
            } => Error::ConfigParse {
                path,
                msg: format!("line {line}: {message}"),
            },
            other => other.into(),
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Residual-stream width d and layer count L of the data.
    pub fn data_layers(&self) -> usize {
        match &self.data {
            DataConfig::Model { layers, .. } => layers.len(),
            DataConfig::Synthetic { layers, .. } => *layers,
            DataConfig::Shards { .. } => 1,
        }
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |key: &str, msg: String| Err(Error::config(key, msg));
        if self.name.trim().is_empty() || self.name.contains(['/', '\\']) {
            return bad(
                "name",
                format!(
                    "{:?} must be a non-empty name without path separators",
                    self.name
                ),
            );
        }
        let s = &self.sae;
        if s.latents == 0 {
            return bad("sae.latents", "must be ≥ 1".into());
        }
        if s.k == 0 || s.k > s.latents {
            return bad(
                "sae.k",
                format!("{} must be in 1..=sae.latents ({})", s.k, s.latents),
            );
        }
        crate::arch::validate(s, self.data_layers())?;
        if !(s.aux.coefficient >= 0.0 && s.aux.coefficient.is_finite()) {
            return bad(
                "sae.aux.coefficient",
                format!("{} must be finite and ≥ 0", s.aux.coefficient),
            );
        }
        if s.aux.k_aux > s.latents {
            return bad(
                "sae.aux.k_aux",
                format!("{} exceeds sae.latents ({})", s.aux.k_aux, s.latents),
            );
        }
        if !(0.0..1.0).contains(&s.threshold.beta) {
            return bad(
                "sae.threshold.beta",
                format!("{} must be in [0, 1)", s.threshold.beta),
            );
        }
        let t = &self.train;
        if t.batch_size == 0 {
            return bad("train.batch_size", "must be ≥ 1".into());
        }
        if t.steps == 0 {
            return bad("train.steps", "must be ≥ 1".into());
        }
        if !(t.lr >= 0.0 && t.lr.is_finite()) {
            return bad(
                "train.lr",
                format!("{} must be finite and ≥ 0 (0 = automatic)", t.lr),
            );
        }
        for (key, v) in [("train.beta1", t.beta1), ("train.beta2", t.beta2)] {
            if !(0.0..1.0).contains(&v) {
                return bad(key, format!("{v} must be in [0, 1)"));
            }
        }
        if t.eps.is_nan() || t.eps <= 0.0 {
            return bad("train.eps", format!("{} must be > 0", t.eps));
        }
        if !(0.0..=1.0).contains(&t.decay_start) {
            return bad(
                "train.decay_start",
                format!("{} must be in [0, 1]", t.decay_start),
            );
        }
        if !(t.grad_clip >= 0.0 && t.grad_clip.is_finite()) {
            return bad(
                "train.grad_clip",
                format!("{} must be finite and ≥ 0", t.grad_clip),
            );
        }
        if t.precision != Precision::F32 && !self.device.is_cuda() {
            return bad(
                "train.precision",
                "tf32 / bf16 apply to device = \"cuda\" only".into(),
            );
        }
        if let Err((key, msg)) = self.selector.validate() {
            return bad(key, msg);
        }
        if let Err((key, msg)) = self.distributed.validate() {
            return bad(key, msg);
        }
        if self.distributed.mode == collective::DistributedMode::Latents {
            return bad(
                "distributed.mode",
                "\"latents\" (latent-sharded training) is not available in train-sae yet; \
                 use \"data\" or \"off\""
                    .into(),
            );
        }
        if let Err(msg) = self.log.validate() {
            return Err(Error::config("log", msg));
        }
        match &self.data {
            DataConfig::Model {
                layers,
                context,
                buffer_tokens,
                held_out_tokens,
                held_out_fraction,
                ..
            } => {
                check_held_out(*held_out_tokens)?;
                if !(0.0..1.0).contains(held_out_fraction) {
                    return bad(
                        "data.held_out_fraction",
                        format!("{held_out_fraction} must be in [0, 1)"),
                    );
                }
                let mut sorted = layers.clone();
                sorted.sort_unstable();
                sorted.dedup();
                if sorted.len() != layers.len() {
                    return bad("data.layers", format!("{layers:?} repeats a layer"));
                }
                if *context < 2 {
                    return bad("data.context", format!("{context} must be ≥ 2"));
                }
                if *buffer_tokens < t.batch_size {
                    return bad(
                        "data.buffer_tokens",
                        format!("{buffer_tokens} is below train.batch_size"),
                    );
                }
            }
            DataConfig::Shards { buffer_tokens, .. } => {
                if *buffer_tokens < t.batch_size {
                    return bad(
                        "data.buffer_tokens",
                        format!("{buffer_tokens} is below train.batch_size"),
                    );
                }
            }
            DataConfig::Synthetic {
                d_model,
                features,
                active_per_token,
                layers,
                held_out_tokens,
            } => {
                check_held_out(*held_out_tokens)?;
                if *d_model == 0 {
                    return bad("data.d_model", "must be ≥ 1".into());
                }
                if *layers == 0 {
                    return bad("data.layers", "must be ≥ 1".into());
                }
                if *active_per_token == 0 || active_per_token > features {
                    return bad(
                        "data.active_per_token",
                        format!("{active_per_token} must be in 1..=data.features"),
                    );
                }
            }
        }
        Ok(())
    }

    /// Learning rate after the automatic rule.
    pub fn lr(&self) -> f64 {
        if self.train.lr > 0.0 {
            self.train.lr
        } else {
            2e-4 / (self.sae.latents as f64 / 16384.0).sqrt()
        }
    }
}
