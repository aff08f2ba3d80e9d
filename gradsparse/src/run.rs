//! A whole `finetune` run: config → run directory → training loop → checkpoints and metrics.
use crate::checkpoint;
use crate::config::FinetuneConfig;
use crate::data::Batches;
use crate::error::{Error, Result};
use crate::trainer::{build_model, device_of, StepReport, Trainer};
use eval::metrics::names;
use eval::train_loop::{self, LoopConfig, LoopSummary, StepContext, StepOutput};
use eval::{
    Metrics, MetricsSink, Progress, RunDir, RunMeta, SinkOptions, StopSignal, WandbOptions,
};
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
}

/// Where a run goes and whether it continues an earlier one.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// The run directory; default `<runs_root>/<name>-<selector>-<timestamp>`.
    pub out: Option<PathBuf>,
    /// Continue the run in `out` from its latest checkpoint.
    pub resume: bool,
    /// Parent of new run directories (default `runs`).
    pub runs_root: Option<PathBuf>,
    /// Stop request (Ctrl-C in the binary).
    pub stop: StopSignal,
    /// Show the progress bar.
    pub progress_bar: bool,
}

/// What a finished (or stopped) run reports.
#[derive(Clone, Debug)]
pub struct RunResult {
    pub run_dir: PathBuf,
    pub summary: LoopSummary,
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

impl eval::Trainer for LoopTrainer {
    type Error = Error;

    fn step(&mut self, _ctx: StepContext) -> Result<StepOutput> {
        let report = self.trainer.train_step()?;
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
    m
}

/// Sections whose change would make a resumed run a different run.
const FIXED_SECTIONS: [&str; 5] = ["name", "model", "data", "sparsify", "selector"];

/// Runs the config at `config_path`.
pub fn finetune(config_path: &Path, opts: &RunOptions) -> Result<RunResult> {
    let toml_text =
        std::fs::read_to_string(config_path).map_err(|e| Error::file(config_path, e))?;
    let cfg = FinetuneConfig::from_toml(&toml_text).map_err(|e| match e {
        Error::Config { key, message } => Error::Config {
            key,
            message: format!("{message} (in {})", config_path.display()),
        },
        other => other,
    })?;
    let config_name = config_path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let device = device_of(&cfg.model.device)?;
    let model = build_model(&cfg, &device)?;
    // Before the trainer multiplies the model's memory and before a run directory exists.
    crate::memory::check(&cfg, model.config(), &device)?;
    let (batches, unigram_entropy) = Batches::from_config(&cfg, model.config().vocab_size)?;
    let unigram_eval_loss =
        batches.unigram_eval_loss(cfg.train.eval_batches, model.config().vocab_size);
    let mut trainer = Trainer::new(cfg.clone(), &model, batches)?;
    drop(model);

    let selector = format!("{:?}", cfg.selector.kind).to_lowercase();
    let (run_dir, start) = if opts.resume {
        let out = opts.out.as_deref().ok_or_else(|| {
            Error::config("--resume", "needs --out DIR naming the run to continue")
        })?;
        let run_dir = RunDir::open_existing(out)?;
        check_same_run(&run_dir, &cfg)?;
        let point = train_loop::resume_point(&run_dir)?;
        checkpoint::load(&mut trainer, &point.dir)?;
        (run_dir, point.progress)
    } else {
        let run_dir = match &opts.out {
            Some(out) => RunDir::create_at(out)?,
            None => {
                let root = opts
                    .runs_root
                    .clone()
                    .unwrap_or_else(|| PathBuf::from("runs"));
                RunDir::create(&root, &format!("{}-{selector}", cfg.name))?
            }
        };
        run_dir.write_config(&toml_text, &cfg)?;
        (run_dir, Progress::default())
    };
    let meta = RunMeta {
        name: run_dir.name(),
        config_name,
        selector,
        task: "finetune".into(),
        details: details(&cfg, &trainer, unigram_entropy, unigram_eval_loss),
        ..run_dir.read_meta().unwrap_or_default()
    };
    run_dir.write_meta(&meta)?;
    let meta = run_dir.read_meta()?;
    let sink_options = SinkOptions {
        wandb: cfg
            .log
            .wandb
            .then(|| WandbOptions::for_run(&run_dir, &meta, &cfg.log)),
    };
    let sink = if opts.resume {
        MetricsSink::resume(&run_dir, start.step, sink_options)?
    } else {
        MetricsSink::create(&run_dir, sink_options)?
    };

    let mut loop_cfg = LoopConfig::new(cfg.train.steps, &cfg.log);
    loop_cfg.checkpoint_every = cfg.train.checkpoint_every;
    loop_cfg.eval_every = cfg.train.eval_every;
    loop_cfg.progress_bar = opts.progress_bar && cfg.log.progress;
    let mut looped = LoopTrainer {
        trainer,
        unigram_entropy,
        unigram_eval_loss,
    };
    let summary = train_loop::run(&mut looped, &run_dir, &sink, &loop_cfg, start, &opts.stop)?;
    sink.finish()?;

    let installed_tiny =
        if cfg.train.install_tiny_default && summary.outcome == eval::Outcome::Completed {
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
        run_dir: run_dir.path().to_path_buf(),
        summary,
        unigram_entropy,
        unigram_eval_loss,
        installed_tiny,
    })
}

fn check_same_run(run_dir: &RunDir, cfg: &FinetuneConfig) -> Result<()> {
    let Some(saved) = run_dir.read_config_json()? else {
        return Ok(());
    };
    let now = serde_json::to_value(cfg).map_err(|e| Error::config("<config>", e.to_string()))?;
    for key in FIXED_SECTIONS {
        if saved.get(key) != now.get(key) {
            return Err(Error::config(
                key,
                format!("differs from the run being resumed in {}; resume with the config it was started with", run_dir.path().display()),
            ));
        }
    }
    Ok(())
}

fn details(
    cfg: &FinetuneConfig,
    trainer: &Trainer,
    unigram_entropy: Option<f64>,
    unigram_eval_loss: Option<f64>,
) -> serde_json::Map<String, serde_json::Value> {
    let mut d = serde_json::Map::new();
    d.insert("model".into(), cfg.model.name.clone().into());
    d.insert("device".into(), cfg.model.device.clone().into());
    d.insert(
        "parameters".into(),
        (trainer.layout().total() as u64).into(),
    );
    d.insert("density".into(), cfg.sparsify.density.into());
    d.insert(
        "scope".into(),
        format!("{:?}", cfg.sparsify.scope).to_lowercase().into(),
    );
    d.insert(
        "batch".into(),
        format!("{} x {}", cfg.data.batch, cfg.data.context).into(),
    );
    if let Some(h) = unigram_entropy {
        d.insert("unigram_entropy".into(), h.into());
    }
    if let Some(u) = unigram_eval_loss {
        d.insert(metric::UNIGRAM_EVAL_LOSS.into(), u.into());
    }
    d
}
