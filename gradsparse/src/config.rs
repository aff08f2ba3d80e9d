//! The `finetune` config file: TOML, every key optional except where noted, unknown keys rejected.
use crate::adamw::AdamWParams;
use crate::error::{Error, Result};
use crate::select::Scope;
use collective::{DistributedConfig, DistributedMode, GradientExchange};
use harness::{LogConfig, SelectorConfig};
use runtime::{config::ConfigSource, config::DeviceSpec};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Keys renamed when the commands' configs took one vocabulary (old → new).
pub const RENAMED: &[(&str, &str)] = &[
    // Replacing the default tiny model is asked for on the command line, never by a config.
    ("train.install_tiny_default", "finetune --install-default"),
    ("model.device", "device"),
    ("model.seed", "seed"),
    ("data.batch", "train.batch_size"),
    ("data.eval_fraction", "data.held_out_fraction"),
    ("train.lr_warmup_steps", "train.warmup_steps"),
    ("train.adam_eps", "train.eps"),
    ("corpus.path", "data.corpus"),
    ("corpus.context_len", "data.context"),
    ("corpus.heldout_fraction", "data.held_out_fraction"),
];

/// The config of `finetune`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct FinetuneConfig {
    /// Run name: the run directory's prefix and the W&B group.
    pub name: String,
    /// `cpu`, `cuda` or `cuda:N`.
    pub device: DeviceSpec,
    /// Seeds the random initialisation and the data order.
    pub seed: u64,
    /// The GPT-2 being trained.
    pub model: ModelConfig,
    /// The corpus and how it is cut into contexts.
    pub data: DataConfig,
    /// The optimization.
    pub train: TrainConfig,
    /// Error-feedback top-k sparsification of the updates.
    pub sparsify: SparsifyConfig,
    /// The selector of every step and the in-run check against a second one.
    pub selector: SelectorConfig,
    /// Logging, the progress bar and Weights & Biases.
    pub log: LogConfig,
    /// Data-parallel training over ranks (`mode = "off"` or `"data"`; `select` does not apply).
    pub distributed: DistributedConfig,
}

/// `[model]`: the GPT-2 being trained.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    /// A size name (`tiny`, `gpt2`, `gpt2-medium`, `gpt2-large`, `gpt2-xl`) for random weights, or
    /// with `init = "load"` a directory / hub id that `gpt2::locate` resolves.
    pub name: String,
    /// `random` (GPT-2's initialisation, seeded) or `load` (pretrained weights from `name`).
    pub init: Init,
    /// Allow TF32 tensor cores for f32 matmuls on CUDA (PyTorch's `allow_tf32`).
    pub tf32: bool,
}

/// Where the model's initial weights come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Init {
    /// GPT-2's initialisation, seeded by `seed`.
    Random,
    /// Pretrained weights from `model.name`.
    Load,
}

/// `[data]`: the corpus and how it is cut into contexts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct DataConfig {
    /// `default` (the shipped corpus), a .txt / .jsonl / .jsonl.gz / .jsonl.zst / .parquet file, a
    /// directory of them, or a hub dataset `hf:OWNER/NAME[/SUBDIR][@REVISION]` (docs/corpora.md).
    pub corpus: String,
    /// The column (JSON field) holding the text; default `text`.
    pub text_column: Option<String>,
    /// A column of token ids (a list of integers per row) used as they are, instead of text.
    pub token_column: Option<String>,
    /// Tokens per context.
    pub context: usize,
    /// Fraction of the corpus' documents held out from training, for the eval loss.
    pub held_out_fraction: f64,
    /// Random token ids instead of a corpus (benchmarks: no tokenizer work, any model size).
    pub synthetic: bool,
}

/// `[train]`: the optimization.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TrainConfig {
    /// Contexts per step (of `data.context` tokens each).
    pub batch_size: usize,
    /// Optimization steps of the whole run.
    pub steps: u64,
    /// Peak AdamW learning rate.
    pub lr: f64,
    /// Linear learning-rate warm-up from 0 over this many steps.
    pub warmup_steps: u64,
    /// Cosine decay to `lr · min_lr_fraction` at the last step.
    pub min_lr_fraction: f64,
    /// AdamW's first-moment decay.
    pub beta1: f64,
    /// AdamW's second-moment decay.
    pub beta2: f64,
    /// AdamW's epsilon, added to the root of the second moment.
    pub eps: f64,
    /// AdamW's decoupled weight decay.
    pub weight_decay: f64,
    /// Steps between checkpoints (0: only at the end and on a stop).
    pub checkpoint_every: u64,
    /// Checkpoints kept in `checkpoints/`: the newest N (0 keeps all).
    pub keep_checkpoints: usize,
    /// Steps between eval-loss measurements (0: never).
    pub eval_every: u64,
    /// Contexts in one eval measurement.
    pub eval_batches: usize,
}

/// `[sparsify]`: error-feedback top-k sparsification of the updates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SparsifyConfig {
    /// `topk` (error feedback and top-k selection) or `dense` (plain AdamW on the whole gradient: the
    /// baseline; every other key of `[sparsify]` and `[selector]` is then ignored).
    pub mode: SparsifyMode,
    /// Fraction ρ of the coordinates applied per step.
    pub density: f64,
    /// Over which coordinates one selection ranks.
    pub scope: Scope,
    /// DGC momentum correction: accumulate the velocity `u = μ·u + g` instead of `g`.
    pub momentum_correction: bool,
    /// μ of the momentum correction.
    pub momentum: f64,
    /// Density warm-up: from `warmup_start_density` to `density`, geometrically, over this many steps.
    pub warmup_steps: u64,
    /// The density the warm-up starts from.
    pub warmup_start_density: f64,
}

/// How the gradient reaches the optimizer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SparsifyMode {
    /// Error feedback: the top `density` of the accumulated gradient is applied, the rest carried over.
    #[default]
    Topk,
    /// Every coordinate every step: no selection, no residual.
    Dense,
}

impl Default for FinetuneConfig {
    fn default() -> Self {
        Self {
            name: "finetune".into(),
            device: DeviceSpec::Cpu,
            seed: 0,
            model: ModelConfig::default(),
            data: DataConfig::default(),
            train: TrainConfig::default(),
            sparsify: SparsifyConfig::default(),
            selector: SelectorConfig::default(),
            log: LogConfig::default(),
            distributed: DistributedConfig::default(),
        }
    }
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            name: "tiny".into(),
            init: Init::Random,
            tf32: true,
        }
    }
}

impl Default for DataConfig {
    fn default() -> Self {
        Self {
            corpus: "default".into(),
            text_column: None,
            token_column: None,
            context: 128,
            held_out_fraction: activations::corpus::DEFAULT_HELD_OUT_FRACTION,
            synthetic: false,
        }
    }
}

impl Default for TrainConfig {
    fn default() -> Self {
        let adam = AdamWParams::default();
        Self {
            batch_size: 8,
            steps: 300,
            lr: 1e-3,
            warmup_steps: 0,
            min_lr_fraction: 1.0,
            beta1: adam.beta1,
            beta2: adam.beta2,
            eps: adam.eps,
            weight_decay: adam.weight_decay,
            checkpoint_every: 0,
            keep_checkpoints: harness::train_loop::DEFAULT_KEEP_CHECKPOINTS,
            eval_every: 0,
            eval_batches: 8,
        }
    }
}

impl Default for SparsifyConfig {
    fn default() -> Self {
        Self {
            mode: SparsifyMode::Topk,
            density: 1e-3,
            scope: Scope::Global,
            momentum_correction: false,
            momentum: 0.9,
            warmup_steps: 0,
            warmup_start_density: 0.25,
        }
    }
}

impl FinetuneConfig {
    /// Reads and validates a config file.
    pub fn from_file(path: &Path) -> Result<Self> {
        Ok(Self::load(path, &[])?.0)
    }

    /// Reads `path`, applies `--set` overrides and validates; also returns the source, which the run
    /// directory records.
    pub fn load(path: &Path, overrides: &[String]) -> Result<(Self, ConfigSource)> {
        let source = ConfigSource::load(path, overrides)?;
        let cfg = Self::from_source(&source).map_err(|e| match e {
            Error::Config { key, message } if !message.contains(" (in ") => Error::Config {
                key,
                message: format!("{message} (in {})", path.display()),
            },
            other => other,
        })?;
        Ok((cfg, source))
    }

    /// Parses and validates TOML text.
    pub fn from_toml(text: &str) -> Result<Self> {
        Self::from_source(&ConfigSource::inline(text)?)
    }

    fn from_source(source: &ConfigSource) -> Result<Self> {
        let cfg: Self = source.parse(RENAMED).map_err(|e| match e {
            runtime::Error::Parse { message, line, .. } => {
                let key = message.split('`').nth(1).unwrap_or("<toml>").to_string();
                Error::config(key, format!("line {line}: {message}"))
            }
            runtime::Error::Config { key, message } => Error::Config { key, message },
            other => other.into(),
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn adamw(&self) -> AdamWParams {
        let t = &self.train;
        AdamWParams {
            beta1: t.beta1,
            beta2: t.beta2,
            eps: t.eps,
            weight_decay: t.weight_decay,
        }
    }

    /// Whether steps apply the whole gradient (`sparsify.mode = "dense"`).
    pub fn is_dense(&self) -> bool {
        self.sparsify.mode == SparsifyMode::Dense
    }

    /// What chooses the applied coordinates, as run names and reports label it: the selector's name,
    /// or `dense`.
    pub fn selector_label(&self) -> String {
        if self.is_dense() {
            "dense".into()
        } else {
            self.selector.kind.name().into()
        }
    }

    /// Checks every value's range; the error names the key.
    pub fn validate(&self) -> Result<()> {
        let check = |ok: bool, key: &str, message: String| {
            if ok {
                Ok(())
            } else {
                Err(Error::config(key, message))
            }
        };
        let unit = |x: f64| x > 0.0 && x <= 1.0;
        let below_one = |x: f64, key: &str| {
            check(
                (0.0..1.0).contains(&x),
                key,
                format!("{x} must be in [0, 1)"),
            )
        };
        let fraction = |x: f64, key: &str| check(unit(x), key, format!("{x} must be in (0, 1]"));
        let m = &self.model;
        check(
            !self.name.is_empty() && !self.name.contains(['/', '\\']),
            "name",
            format!("{:?} must be a non-empty file name", self.name),
        )?;
        if m.init == Init::Random {
            check(
                gpt2::Gpt2Config::by_name(&m.name).is_some(),
                "model.name",
                format!("{:?} is not a size name (tiny, gpt2, gpt2-medium, gpt2-large, gpt2-xl); set model.init = \"load\" to load a directory", m.name),
            )?;
        }
        let d = &self.data;
        check(
            d.context >= 2,
            "data.context",
            format!("{} must be at least 2 (one prediction)", d.context),
        )?;
        check(
            self.train.batch_size >= 1,
            "train.batch_size",
            "must be at least 1".into(),
        )?;
        below_one(d.held_out_fraction, "data.held_out_fraction")?;
        check(
            d.corpus == "default" || d.corpus.starts_with("hf:") || Path::new(&d.corpus).exists(),
            "data.corpus",
            format!(
                "{} does not exist (use \"default\" for the shipped corpus)",
                d.corpus
            ),
        )?;
        let t = &self.train;
        check(t.steps >= 1, "train.steps", "must be at least 1".into())?;
        check(
            t.lr > 0.0 && t.lr.is_finite(),
            "train.lr",
            format!("{} must be positive", t.lr),
        )?;
        check(
            unit(t.min_lr_fraction) || t.min_lr_fraction == 0.0,
            "train.min_lr_fraction",
            format!("{} must be in [0, 1]", t.min_lr_fraction),
        )?;
        below_one(t.beta1, "train.beta1")?;
        below_one(t.beta2, "train.beta2")?;
        check(
            t.eps > 0.0,
            "train.eps",
            format!("{} must be positive", t.eps),
        )?;
        check(
            t.weight_decay >= 0.0,
            "train.weight_decay",
            format!("{} must be non-negative", t.weight_decay),
        )?;
        check(
            t.eval_batches >= 1,
            "train.eval_batches",
            "must be at least 1".into(),
        )?;
        let s = &self.sparsify;
        fraction(s.density, "sparsify.density")?;
        below_one(s.momentum, "sparsify.momentum")?;
        fraction(s.warmup_start_density, "sparsify.warmup_start_density")?;
        self.log.validate().map_err(|message| {
            let key = message
                .split_whitespace()
                .next()
                .unwrap_or("log")
                .to_string();
            Error::config(key, message)
        })?;
        if let Err((key, message)) = self.selector.validate() {
            return Err(Error::config(key, message));
        }
        if let Err((key, message)) = self.distributed.validate() {
            return Err(Error::config(key, message));
        }
        check(
            self.distributed.mode != DistributedMode::Latents,
            "distributed.mode",
            "\"latents\" is train-sae's mode; finetune supports \"off\" and \"data\"".into(),
        )?;
        check(
            !(self.distributed.is_distributed()
                && self.is_dense()
                && self.distributed.exchange != GradientExchange::Dense),
            "distributed.exchange",
            format!(
                "{:?} exchanges selected coordinates, but sparsify.mode = \"dense\" selects none; \
                 use exchange = \"dense\" for the dense baseline",
                self.distributed.exchange
            )
            .to_lowercase(),
        )?;
        Ok(())
    }

    /// Density at `step` (0-based): geometric warm-up from `warmup_start_density` to `density`.
    pub fn density_at(&self, step: u64) -> f64 {
        let s = &self.sparsify;
        if step >= s.warmup_steps || s.warmup_start_density <= s.density {
            return s.density;
        }
        let f = step as f64 / s.warmup_steps as f64;
        s.warmup_start_density.powf(1.0 - f) * s.density.powf(f)
    }

    /// Learning rate at `step` (0-based): linear warm-up, then cosine decay to `lr · min_lr_fraction`.
    pub fn lr_at(&self, step: u64) -> f64 {
        let t = &self.train;
        if step < t.warmup_steps {
            return t.lr * (step + 1) as f64 / t.warmup_steps as f64;
        }
        let span = t.steps.saturating_sub(t.warmup_steps).max(1) as f64;
        let progress = ((step - t.warmup_steps) as f64 / span).min(1.0);
        let floor = t.lr * t.min_lr_fraction;
        floor + (t.lr - floor) * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos())
    }
}
