//! A whole `finetune` run: config → run directory → training loop → checkpoints and metrics.
use crate::error::{Error, Result};
use crate::trainer::{build_model, device_of, StepReport, Trainer};
use crate::{checkpoint, config::FinetuneConfig, data::Batches};
use harness::metrics::names;
use harness::train_loop::{LoopConfig, LoopSummary, StepContext, StepOutput};
use harness::{Metrics, Progress};
use runtime::signal::StopSignal;
use std::path::{Path, PathBuf};

/// Metric names of a fine-tuning step besides eval's shared ones (loss, select_ms, step_ms...).
pub mod metric {
    pub const FORWARD_BACKWARD_MS: &str = "forward_backward_ms";
    pub const ACCUMULATE_MS: &str = "accumulate_ms";
    pub const APPLY_MS: &str = "apply_ms";
    pub const OVERHEAD_MS: &str = "ef_overhead_ms";
    pub const COMPARE_MS: &str = "compare_select_ms";
    pub const DENSITY: &str = "density";
    pub const K: &str = "k";
    pub const LR: &str = "lr";
    pub const EVAL_LOSS: &str = "eval_loss";
    pub const UNIGRAM_ENTROPY: &str = "unigram_entropy";
    /// The best add-α unigram model of the training tokens, scored on the eval loss's tokens.
    pub const UNIGRAM_EVAL_LOSS: &str = "unigram_eval_loss";
    /// L2 norm of the error-feedback residual after the step's selection (0 in dense mode).
    pub const EF_RESIDUAL_NORM: &str = "ef_residual_norm";
    /// Share of the accumulated gradient's squared L2 mass the selection applied (1 in dense mode).
    pub const EF_KEPT_SHARE: &str = "ef_kept_share";
    /// Data-parallel runs: bytes this rank handed to the collectives this step.
    pub const WIRE_BYTES: &str = "wire_bytes";
    /// What the `dense` exchange would have sent: the f32 gradient (and velocity).
    pub const WIRE_DENSE_BYTES: &str = "wire_dense_bytes";
    /// `wire_dense_bytes / wire_bytes`.
    pub const WIRE_RATIO: &str = "wire_ratio";
    /// Time inside the collectives this step.
    pub const COLLECTIVE_MS: &str = "collective_ms";
    /// The weights' 64-bit hash, its top 53 bits as an exact integer, every `distributed.hash_every`
    /// steps (equal on every rank: checked).
    pub const WEIGHTS_HASH: &str = "weights_hash";
}

/// Where a run goes and whether it continues an earlier one.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// `--set section.key=value` overrides, applied to the file's TOML before it is checked.
    pub overrides: Vec<String>,
    /// The run directory; default `<runs_root>/<name>-<selector>-<timestamp>`.
    pub out: Option<PathBuf>,
    /// Continue the run in `out` from its latest checkpoint.
    pub resume: bool,
    /// Parent of new run directories (default `runs`).
    pub runs_root: Option<PathBuf>,
    /// Stop request: [`StopSignal::install`] in the binary (SIGINT, SIGTERM).
    pub stop: StopSignal,
    /// Show the progress bar.
    pub progress_bar: bool,
    /// The binary's build, recorded in run.json (`sparsetrain::build_info()`).
    pub build: harness::BuildInfo,
    /// After a run that finished, install the trained model as the default tiny model
    /// (`activations::tiny::model_dir()`), which `model = "tiny"` then loads (`--install-default`).
    pub install_default: bool,
    /// A group this process already joined (a program embedding the trainer, or the tests' thread
    /// double); `None`: the command joins what `[distributed]` asks for.
    pub group: Option<harness::RankGroup>,
}

/// What a finished (or stopped) run reports.
#[derive(Clone, Debug)]
pub struct RunResult {
    pub run_dir: PathBuf,
    pub summary: LoopSummary,
    /// 0, or 128 + signal for a run stopped by one.
    pub exit_code: i32,
    pub unigram_entropy: Option<f64>,
    /// The context-free baseline of the eval loss (see [`metric::UNIGRAM_EVAL_LOSS`]).
    pub unigram_eval_loss: Option<f64>,
    /// Where the trained model was installed as the default tiny model, if it was.
    pub installed_tiny: Option<PathBuf>,
}

/// The training loop's view of a [`Trainer`].
struct LoopTrainer {
    trainer: Trainer,
    unigram_entropy: Option<f64>,
    unigram_eval_loss: Option<f64>,
}

impl harness::Trainer for LoopTrainer {
    type Error = Error;

    fn step(&mut self, ctx: StepContext) -> Result<StepOutput> {
        // The error-feedback metrics cost two passes over the residual: logged steps only.
        let report = if ctx.log {
            self.trainer.train_step_with_stats()?
        } else {
            self.trainer.train_step()?
        };
        Ok(StepOutput {
            tokens: report.tokens,
            metrics: step_metrics(&report),
        })
    }

    fn save_checkpoint(&mut self, dir: &Path, _progress: &Progress) -> Result<()> {
        checkpoint::save(&self.trainer, dir)
    }

    fn eval(&mut self, _progress: &Progress) -> Result<Metrics> {
        let mut metrics = Metrics::new();
        if let Some(loss) = self
            .trainer
            .eval_loss(self.trainer.config().train.eval_batches)?
        {
            metrics.insert(metric::EVAL_LOSS.into(), loss as f64);
        }
        if let Some(h) = self.unigram_entropy {
            metrics.insert(metric::UNIGRAM_ENTROPY.into(), h);
        }
        if let Some(u) = self.unigram_eval_loss {
            metrics.insert(metric::UNIGRAM_EVAL_LOSS.into(), u);
        }
        Ok(metrics)
    }
}

/// The metrics record of one step.
pub fn step_metrics(r: &StepReport) -> Metrics {
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let mut m = Metrics::from([
        (names::LOSS.to_string(), r.loss as f64),
        (names::SELECT_MS.to_string(), ms(r.select)),
        (
            metric::FORWARD_BACKWARD_MS.to_string(),
            ms(r.forward_backward),
        ),
        (metric::ACCUMULATE_MS.to_string(), ms(r.accumulate)),
        (metric::APPLY_MS.to_string(), ms(r.apply)),
        (metric::OVERHEAD_MS.to_string(), ms(r.overhead())),
        (metric::DENSITY.to_string(), r.density),
        (metric::K.to_string(), r.k as f64),
        (metric::LR.to_string(), r.lr),
    ]);
    if let Some(c) = r.compare {
        m.insert(metric::COMPARE_MS.into(), ms(c));
    }
    if let Some(f) = &r.feedback {
        m.insert(metric::EF_RESIDUAL_NORM.into(), f.residual_norm);
        m.insert(metric::EF_KEPT_SHARE.into(), f.kept_share);
    }
    if let Some(w) = &r.wire {
        m.insert(metric::WIRE_BYTES.into(), w.sent as f64);
        m.insert(metric::WIRE_DENSE_BYTES.into(), w.dense as f64);
        m.insert(metric::WIRE_RATIO.into(), w.ratio());
        m.insert(metric::COLLECTIVE_MS.into(), ms(w.collective));
    }
    if let Some(h) = r.weights_hash {
        m.insert(metric::WEIGHTS_HASH.into(), (h >> 11) as f64);
    }
    m
}

/// What a resume may change; every other key must be as the run was started.
const RESUMABLE: &[&str] = &[
    "device",
    "train.steps",
    "train.checkpoint_every",
    "train.keep_checkpoints",
    "train.eval_every",
    "train.eval_batches",
    "log",
    "distributed.timeout_s",
    "distributed.hash_every",
];

/// Runs the config at `config_path`.
pub fn finetune(config_path: &Path, opts: &RunOptions) -> Result<RunResult> {
    let (cfg, source) = FinetuneConfig::load(config_path, &opts.overrides)?;
    if let Some(note) = cfg.selector.note() {
        eprintln!("{note}");
    }
    let device = device_of(crate::distributed::rank_device(
        &cfg.distributed,
        cfg.device,
    )?)?;
    // Before anything heavy: a distributed run on the CPU is refused here.
    let group = match &opts.group {
        Some(g) if cfg.distributed.is_distributed() => Some(crate::distributed::Group::new(
            g.shared(),
            cfg.distributed.exchange,
        )),
        Some(_) => {
            return Err(Error::config(
                "distributed.mode",
                "the run was given a group of ranks; set distributed.mode = \"data\"",
            ))
        }
        None => crate::distributed::join(&cfg.distributed, &device)?,
    };
    let ranks = match &opts.group {
        Some(given) => Some(given.clone()),
        None => group.as_ref().map(|g| {
            harness::RankGroup::new(g.shared()).with_stall_timeout(cfg.distributed.timeout())
        }),
    };
    // Hashed beside the model loading (a multi-GB weights file takes seconds).
    let hashing = {
        let (model, seed) = (cfg.model.clone(), cfg.seed);
        std::thread::spawn(move || model_identity(&model, seed))
    };
    let model = build_model(&cfg, &device)?;
    if opts.install_default && model.config() != &gpt2::Gpt2Config::tiny() {
        return Err(Error::config(
            "model.name",
            format!(
                "--install-default installs the tiny GPT-2 that `model = \"tiny\"` loads; {:?} has \
                 another shape",
                cfg.model.name
            ),
        ));
    }
    // Before the trainer multiplies the model's memory and before a run directory exists.
    crate::memory::check(&cfg, model.config(), &device)?;
    let (batches, unigram_entropy) = Batches::from_config(&cfg, model.config().vocab_size)?;
    let unigram_eval_loss =
        batches.unigram_eval_loss(cfg.train.eval_batches, model.config().vocab_size);
    let mut trainer = Trainer::with_group(cfg.clone(), &model, batches, group)?;
    if let Some(group) = trainer.group() {
        // Every rank builds the model from the same config: check that they start alike.
        let hash = crate::distributed::weights_hash(trainer.vars())?;
        crate::distributed::check_hashes(group.collective(), 0, hash)?;
    }
    drop(model);
    let model_sha256 = hashing
        .join()
        .map_err(|_| Error::config("model.name", "hashing the weights failed"))??;

    let launch = harness::Launch::open_in(
        harness::LaunchSpec {
            command: "finetune".into(),
            task: "finetune".into(),
            resolved: serde_json::to_value(&cfg)
                .map_err(|e| Error::config("<config>", e.to_string()))?,
            source,
            name: cfg.name.clone(),
            selector: cfg.selector_label(),
            resumable: RESUMABLE.iter().map(|k| k.to_string()).collect(),
            out: opts.out.clone(),
            resume: opts.resume,
            runs_root: opts
                .runs_root
                .clone()
                .unwrap_or_else(|| PathBuf::from("runs")),
            log: cfg.log.clone(),
            build: opts.build.clone(),
            model_sha256: Some(model_sha256),
        },
        ranks,
    )?;
    let leads = launch.leads();
    let start = match launch.resume_from() {
        Some(point) => {
            checkpoint::load(&mut trainer, &point.dir)?;
            point.progress
        }
        None => Progress::default(),
    };
    let mut loop_cfg = LoopConfig::new(cfg.train.steps, &cfg.log);
    loop_cfg.checkpoint_every = cfg.train.checkpoint_every;
    loop_cfg.keep_checkpoints = cfg.train.keep_checkpoints;
    loop_cfg.eval_every = cfg.train.eval_every;
    loop_cfg.progress_bar = opts.progress_bar && cfg.log.progress;
    let details = details(&cfg, &trainer, unigram_entropy, unigram_eval_loss);
    let mut looped = LoopTrainer {
        trainer,
        unigram_entropy,
        unigram_eval_loss,
    };
    let finished = launch.train(&mut looped, &loop_cfg, start, details, &opts.stop)?;
    // Rank 0 writes the report and installs the model; the other ranks only trained.
    if leads && !finished.stopped() {
        let run = harness::RunDir::open_existing(&finished.run_dir)?;
        eval::report::write_run_report(&run)?;
    }

    let installed_tiny = if leads && opts.install_default && !finished.stopped() {
        let dir = activations::tiny::model_dir();
        looped
            .trainer
            .model()
            .save_hf(&dir)
            .map_err(|e| Error::file(&dir, e))?;
        Some(dir)
    } else {
        None
    };
    Ok(RunResult {
        exit_code: finished.exit_code(),
        run_dir: finished.run_dir,
        summary: finished.summary,
        unigram_entropy,
        unigram_eval_loss,
        installed_tiny,
    })
}

/// What identifies the starting weights: the hash of the files loaded
/// ([`activations::models::files_sha256`]), or the size and seed of a random initialization.
fn model_identity(model: &crate::config::ModelConfig, seed: u64) -> Result<String> {
    let err = |e: String| Error::config("model.name", e);
    match model.init {
        crate::config::Init::Random => Ok(format!("random:{}:{seed}", model.name)),
        crate::config::Init::Load => {
            let files = gpt2::locate(&model.name).map_err(|e| err(e.to_string()))?;
            activations::models::files_sha256(&files.weights).map_err(|e| err(e.to_string()))
        }
    }
}

fn details(
    cfg: &FinetuneConfig,
    trainer: &Trainer,
    unigram_entropy: Option<f64>,
    unigram_eval_loss: Option<f64>,
) -> serde_json::Map<String, serde_json::Value> {
    let mut d = serde_json::Map::new();
    d.insert("model".into(), cfg.model.name.clone().into());
    d.insert("device".into(), cfg.device.to_string().into());
    d.insert(
        "parameters".into(),
        (trainer.layout().total() as u64).into(),
    );
    if cfg.is_dense() {
        d.insert(
            "sparsify".into(),
            "dense: no selection, no error feedback".into(),
        );
    } else {
        d.insert("density".into(), cfg.sparsify.density.into());
        d.insert(
            "scope".into(),
            format!("{:?}", cfg.sparsify.scope).to_lowercase().into(),
        );
    }
    d.insert(
        "batch".into(),
        format!("{} x {}", cfg.train.batch_size, cfg.data.context).into(),
    );
    if let Some(group) = trainer.group() {
        d.insert(
            "distributed".into(),
            format!(
                "data-parallel, rank {} of {}, {:?} exchange, batch per rank",
                group.rank(),
                group.world(),
                group.exchange
            )
            .to_lowercase()
            .into(),
        );
    }
    if let Some(h) = unigram_entropy {
        d.insert("unigram_entropy".into(), h.into());
    }
    if let Some(u) = unigram_eval_loss {
        d.insert(metric::UNIGRAM_EVAL_LOSS.into(), u.into());
    }
    d
}
