//! `train-sae CONFIG [--out DIR] [--resume]`: builds the activation source from the config, trains through
//! the shared launcher (run directory and lock, progress, metrics.jsonl, checkpoints, SIGINT / SIGTERM), evaluates on held-out tokens
//! (FVU, L0, CE-loss recovered with the SAE spliced in at its hook, a crosscoder at all of its hooks) and writes
//! the SAE in SAELens' layout.
use crate::checkpoint::{link_saelens, load_state, save_state, write_saelens, StateImage};
use crate::config::{Config, DataConfig, Precision};
use crate::data::{skip, with_layer_axis, Synthetic};
use crate::features::{contexts_wanted, DashboardPlan, FeatureOptions};
use crate::{trainer::Trainer, Error, Result};
use activations::corpus::{CorpusSource, PackOptions, Split};
use activations::{ActivationSource, OnTheFly, OnTheFlyOptions};
use candle_core::{DType, Device, Tensor};
use eval::heldout::heldout_rows;
use eval::measures::{ce_splices, CeSplices};
use gpt2::HookPoint;
use harness::{LoopConfig, Metrics, Progress, StepContext, StepOutput};
use models::Model;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Command-line options of `train-sae`.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    pub config: PathBuf,
    /// `--set section.key=value` overrides, applied to the file's TOML before it is checked.
    pub overrides: Vec<String>,
    /// Run directory; default `runs/<name>-<selector>-<timestamp>`.
    pub out: Option<PathBuf>,
    /// Continue the run in `out` from its latest checkpoint.
    pub resume: bool,
    /// Stop request: [`runtime::signal::StopSignal::install`] in the binary (SIGINT, SIGTERM).
    pub stop: runtime::signal::StopSignal,
    /// The binary's build, recorded in run.json (`sparsetrain::build_info()`).
    pub build: harness::BuildInfo,
    /// A group this process already joined (a program embedding the trainer, or the tests' thread
    /// double); `None`: the command joins what `[distributed]` asks for.
    pub group: Option<harness::RankGroup>,
}

/// What a finished (or stopped) run reports.
pub struct RunSummary {
    pub run_dir: PathBuf,
    pub stopped: bool,
    pub step: u64,
    pub final_eval: Option<Metrics>,
    /// 0, or 128 + signal for a run stopped by one.
    pub exit_code: i32,
    /// Set when the run had no held-out data: says so and how to get a held-out evaluation.
    pub no_held_out: Option<String>,
}

/// How a model-backed run packs its corpus (training, held-out evaluation and dashboards alike):
/// contexts of `context` tokens, the model's BOS first, `held_out_fraction` of the documents held
/// out, text tokenized by the tokenizer of `model`.
pub(crate) fn pack_options(
    split: Split,
    context: usize,
    held_out_fraction: f64,
    model: &str,
) -> Result<PackOptions> {
    Ok(PackOptions {
        split,
        heldout_fraction: held_out_fraction,
        context_len: context,
        prepend_bos: true,
        tokenizer: activations::Tokenizer::for_model(model)?,
    })
}
/// Contexts per model forward when activations are produced on the fly.
const BATCH_CONTEXTS: usize = 8;
/// What a resume may change; every other key must be as the run was started.
const RESUMABLE: &[&str] = &[
    "train.steps",
    "train.checkpoint_every",
    "train.keep_checkpoints",
    "train.profile_stages",
    "device",
    "log",
    "eval",
    "distributed",
];

pub fn train_sae(opts: &RunOptions) -> Result<RunSummary> {
    let began = std::time::Instant::now();
    let (cfg, source) = Config::load(&opts.config, &opts.overrides)?;
    // Hashed beside the model and data loading (a multi-GB weights file takes seconds).
    let hashing = {
        let data = cfg.data.clone();
        std::thread::spawn(move || model_identity(&data))
    };
    let device = runtime::device::open_device("device", crate::distributed::rank_device(&cfg)?)?;
    // Before anything is loaded: a distributed run on the CPU is refused at once.
    let group = match &opts.group {
        Some(group) if cfg.distributed.is_distributed() => Some(group.clone()),
        Some(_) => {
            return Err(Error::config(
                "distributed.mode",
                "the run was given a group of ranks; set distributed.mode = \"data\"",
            ))
        }
        None => crate::distributed::join(&cfg, &device)?,
    };
    let ranks = group
        .as_ref()
        .map(|g| Arc::new(crate::distributed::Ranks::new(g.shared(), &cfg.distributed)));
    let device_ready = began.elapsed();
    set_precision(cfg.train.precision);
    #[cfg(feature = "cuda")]
    if device.is_cuda() {
        gpt2::ops::keep_pool_memory(&device)?;
    }
    // The model and data load before the run directory exists: a missing model leaves nothing behind.
    let mut data = Data::open(&cfg, &device)?;
    data.share = group.as_ref().map(|g| (g.rank(), g.world()));
    let data_ready = began.elapsed();
    let random_weights = match &cfg.data {
        DataConfig::Model { model, .. } => activations::models::random_weights_warning(model),
        _ => None,
    };
    if let Some(w) = &random_weights {
        eprintln!("warning: {w}");
    }
    if let Some(note) = cfg.selector.note() {
        eprintln!("{note}");
    }
    // Before the SAE is allocated and before a run directory exists: an impossible size is a config error.
    crate::memory::check(&cfg, data.train.d_model(), &device)?;
    let no_held_out = data.heldout.is_none().then(|| no_held_out_hint(&cfg.data));
    if let Some(hint) = &no_held_out {
        eprintln!("note: {hint}");
    }
    let model_sha256 = hashing
        .join()
        .map_err(|_| Error::Data("hashing the model weights failed".into()))??;
    let launch = harness::Launch::open_in(
        harness::LaunchSpec {
            command: "train-sae".into(),
            task: "sae".into(),
            resolved: serde_json::to_value(&cfg)
                .map_err(|e| Error::config("<config>", e.to_string()))?,
            source,
            name: cfg.name.clone(),
            selector: cfg.selector.kind.name().into(),
            resumable: RESUMABLE.iter().map(|k| k.to_string()).collect(),
            out: opts.out.clone(),
            resume: opts.resume,
            runs_root: PathBuf::from("runs"),
            log: cfg.log.clone(),
            build: opts.build.clone(),
            model_sha256,
        },
        group.clone(),
    )?;
    let leads = launch.leads();
    let mut batch_ready = began.elapsed();
    let (trainer, start, pending) = match launch.resume_from() {
        Some(ckpt) => {
            let mut trainer = load_state(&ckpt.dir, cfg.clone(), &device)?;
            trainer.ranks = ranks;
            skip(data.train.as_mut(), trainer.tokens, cfg.train.batch_size)?;
            (trainer, ckpt.progress, None)
        }
        None => {
            let first = data.next_train(cfg.train.batch_size)?;
            batch_ready = began.elapsed();
            let trainer = match ranks {
                Some(ranks) => Trainer::new_in(cfg.clone(), &first, &device, ranks)?,
                None => Trainer::new(cfg.clone(), &first, &device)?,
            };
            (trainer, Progress::default(), Some(first))
        }
    };
    let sae_ready = began.elapsed();
    let mut loop_cfg = LoopConfig::new(cfg.train.steps, &cfg.log);
    loop_cfg.checkpoint_every = cfg.train.checkpoint_every;
    loop_cfg.keep_checkpoints = cfg.train.keep_checkpoints;
    loop_cfg.final_eval = cfg.eval.enabled;
    loop_cfg.progress_metrics = vec!["loss".into(), "fvu".into(), "l0".into()];
    let mut trainer = trainer;
    trainer.profile = cfg.train.profile_stages;
    let run_dir = launch.run_dir().clone();
    let mut job = SaeJob {
        trainer,
        data,
        pending,
        random_weights: random_weights.is_some(),
        data_failed: false,
        run_dir: run_dir.clone(),
        leads,
    };
    let mut facts = details(&cfg);
    facts.insert("dashboards".into(), job.data.dashboards.describe().into());
    if let Some(c) = &job.data.detected_token_column {
        facts.insert(
            "corpus_column".into(),
            format!("token ids from \"{c}\" (no \"text\" column)").into(),
        );
    }
    if let Some(w) = &random_weights {
        facts.insert("warning".into(), w.clone().into());
    }
    if let Some(hint) = &no_held_out {
        facts.insert("held_out".into(), hint.clone().into());
    }
    // Startup ends before training starts, so that startup, training and exporting never overlap.
    let startup = began.elapsed();
    let training = std::time::Instant::now();
    let finished = launch.train(&mut job, &loop_cfg, start, facts, &opts.stop)?;
    let trained = training.elapsed();
    if !leads {
        // Rank 0 exports the SAE, evaluates it and writes the report.
        return Ok(RunSummary {
            run_dir: finished.run_dir.clone(),
            stopped: finished.stopped(),
            step: finished.summary.progress.step,
            exit_code: finished.exit_code(),
            final_eval: None,
            no_held_out: None,
        });
    }
    if !finished.stopped() {
        let sae_dir = crate::hub::export_dir(run_dir.path(), &job.trainer.cfg);
        std::fs::create_dir_all(&sae_dir).map_err(|e| Error::io(&sae_dir, e))?;
        let t = &job.trainer;
        // The final checkpoint holds this SAE already: linked, not written again (written where the
        // file system has no hard links).
        let linked = finished
            .summary
            .last_checkpoint
            .as_deref()
            .is_some_and(|ckpt| link_saelens(ckpt, &sae_dir).is_ok());
        if !linked {
            write_saelens(&sae_dir, &t.cfg, &t.sae, t.threshold, &t.scales)?;
        }
        crate::hub::write_release(run_dir.path(), None)?;
        match job.data.dashboards.unavailable() {
            Some(why) => eprintln!("no feature dashboards: {why}"),
            None => {
                let sae =
                    crate::features::InferenceSae::from_trained(&t.sae, t.threshold, &t.scales)?;
                let opts = FeatureOptions::default();
                if let Some(dashboards) = job.data.dashboards.build(&sae, &opts, &device)? {
                    dashboards.write(run_dir.path())?;
                }
            }
        }
        // The report the launcher wrote, again with the dashboards.
        eval::report::write_report(std::slice::from_ref(&run_dir), &run_dir.report_path())?;
        if cfg.log.wandb {
            harness::wandb::log_artifact(&run_dir, &cfg.log, &sae_dir, "sae", "model");
        }
    }
    // Where a whole run's wall time goes beside the loop's own (bench/data_path.py reads this line).
    eprintln!(
        "time: {:.1} s before the first step (device {:.1} s, data {:.1} s, first batch {:.1} s, SAE {:.1} s), \
         {:.1} s training ({:.1} s of it checkpointing), {:.1} s exporting",
        startup.as_secs_f64(),
        device_ready.as_secs_f64(),
        data_ready.saturating_sub(device_ready).as_secs_f64(),
        batch_ready.saturating_sub(data_ready).as_secs_f64(),
        sae_ready
            .saturating_sub(batch_ready.max(data_ready))
            .as_secs_f64(),
        trained.as_secs_f64(),
        finished.summary.checkpoint_time.as_secs_f64(),
        began
            .elapsed()
            .saturating_sub(startup + trained)
            .as_secs_f64()
    );
    Ok(RunSummary {
        run_dir: finished.run_dir.clone(),
        stopped: finished.stopped(),
        step: finished.summary.progress.step,
        exit_code: finished.exit_code(),
        final_eval: finished.summary.final_eval,
        no_held_out,
    })
}

/// What a run without held-out data prints and records: that FVU and L0 were not measured on held-out
/// tokens, and the key that changes it.
fn no_held_out_hint(data: &DataConfig) -> String {
    let how = match data {
        DataConfig::Shards { .. } => {
            "extract held-out activations (`extract CONFIG --set data.split=heldout --set \
             out_dir=DIR`) and set data.held_out_dir = DIR"
        }
        _ => "set data.held_out_tokens (e.g. 8192)",
    };
    format!(
        "no held-out evaluation: heldout_fvu and heldout_l0 were not measured; the train-batch fvu \
         and l0 are all there is. For one, {how}"
    )
}

/// What identifies the model whose activations the SAE learns (see
/// [`activations::models::weights_identity`]): for shards, what their manifest recorded.
fn model_identity(data: &DataConfig) -> Result<Option<String>> {
    Ok(match data {
        DataConfig::Model { model, .. } => Some(activations::models::weights_identity(model)?),
        DataConfig::Shards { dir, .. } => {
            let manifest = activations::shards::Manifest::read(dir)?;
            Some(manifest.model_sha256.unwrap_or_else(|| {
                format!(
                    "unknown (the shards' manifest names model `{}` without a hash)",
                    manifest.model
                )
            }))
        }
        DataConfig::Synthetic { .. } => None,
    })
}

/// Facts shown in the report beside the run.
fn details(cfg: &Config) -> serde_json::Map<String, serde_json::Value> {
    let mut d = serde_json::Map::new();
    d.insert("device".into(), cfg.device.to_string().into());
    d.insert(
        "arch".into(),
        format!("{:?}", cfg.sae.arch).to_lowercase().into(),
    );
    d.insert("latents".into(), cfg.sae.latents.into());
    d.insert("k".into(), cfg.sae.k.into());
    d.insert("batch_size".into(), cfg.train.batch_size.into());
    d
}

#[cfg(feature = "cuda")]
fn set_precision(p: Precision) {
    candle_core::cuda::set_gemm_reduced_precision_f32(p == Precision::Tf32);
    candle_core::cuda::set_gemm_reduced_precision_bf16(p == Precision::Bf16);
}

#[cfg(not(feature = "cuda"))]
fn set_precision(_: Precision) {}

/// The training stream, the held-out activations, (for a model source) what CE-loss recovered needs, and
/// where the feature dashboards come from.
pub struct Data {
    pub train: Box<dyn ActivationSource>,
    pub heldout: Option<Tensor>,
    pub splice: Option<Splice>,
    pub dashboards: DashboardPlan,
    /// The corpus' token column, read because it has no text column and the config names none.
    pub detected_token_column: Option<String>,
    /// This rank's place `(rank, world)` in a group: every rank reads the one training stream and
    /// keeps its rows of each global batch, so W ranks train on the batches one process would, and
    /// a checkpoint's token count resumes the stream at any world size.
    pub share: Option<(usize, usize)>,
}

/// A model, the SAE's hook points (one per layer of the SAE) and held-out contexts: the SAE is spliced in there
/// to measure CE-loss recovered.
pub struct Splice {
    pub model: Arc<Model>,
    pub hooks: Vec<HookPoint>,
    pub tokens: Tensor,
}

impl Data {
    pub fn open(cfg: &Config, device: &Device) -> Result<Self> {
        match &cfg.data {
            DataConfig::Synthetic {
                d_model,
                layers,
                features,
                active_per_token,
                held_out_tokens,
            } => {
                let make = |stream| {
                    Synthetic::new(
                        *d_model,
                        *layers,
                        *features,
                        *active_per_token,
                        cfg.seed,
                        stream,
                        device,
                    )
                };
                let heldout = match *held_out_tokens {
                    0 => None,
                    n => make(cfg.seed ^ 0x4e1d0_u64).next_batch(n)?,
                };
                Ok(Self {
                    train: Box::new(make(cfg.seed)),
                    heldout,
                    splice: None,
                    dashboards: DashboardPlan::Unavailable(
                        "synthetic data has no tokens to show".into(),
                    ),
                    detected_token_column: None,
                    share: None,
                })
            }
            DataConfig::Shards {
                dir,
                buffer_tokens,
                held_out_dir,
                mix_shards,
                prefetch,
            } => {
                let open = |dir: &Path, repeat: bool, prefetch: usize| {
                    let probe = activations::shards::Manifest::read(dir)?;
                    let row_bytes = probe.d_model * 4 * probe.hook_points.len().max(1);
                    let opts = activations::ReaderOptions {
                        buffer_bytes: buffer_tokens * row_bytes,
                        seed: cfg.seed,
                        repeat,
                        device: device.clone(),
                        mix_shards: *mix_shards,
                        prefetch,
                        ..Default::default()
                    };
                    Ok::<_, Error>(activations::ShardReader::open(dir, opts)?)
                };
                let heldout = match held_out_dir {
                    Some(h) => {
                        let held = open(h, false, 0)?.next_batch(*buffer_tokens)?;
                        check_held_out_rows("data.held_out_dir", held.as_ref(), *buffer_tokens)?;
                        held
                    }
                    None => None,
                };
                let dashboards =
                    DashboardPlan::shards(dir, held_out_dir.as_deref(), "data.held_out_dir")?;
                Ok(Self {
                    train: Box::new(open(dir, true, *prefetch)?),
                    heldout,
                    splice: None,
                    dashboards,
                    detected_token_column: None,
                    share: None,
                })
            }
            DataConfig::Model {
                model,
                hook,
                layers,
                corpus,
                context,
                held_out_fraction,
                dtype,
                held_out_tokens,
                buffer_tokens,
                shuffle_contexts,
                prefetch,
                ..
            } => {
                let dtype = runtime::device::candle_dtype(*dtype);
                let model_spec: &str = model;
                let model = Arc::new(activations::models::load_model(model, dtype, device)?);
                check_model_fit(layers, *context, &model)?;
                let hooks: Vec<HookPoint> = layers.iter().map(|&l| hook.at(l)).collect();
                let spec = cfg.data.corpus_spec().ok_or_else(|| {
                    Error::config("data.corpus", "a model-backed source names its corpus")
                })?;
                let source = CorpusSource::open(&spec)?;
                if let Some(note) = source.detection_note() {
                    eprintln!("{note}");
                }
                // A streamed corpus is read only as far as the run needs (rows per context: context − 1).
                let rows = context.saturating_sub(1).max(1);
                let bound = |tokens: usize| source.is_streamed().then(|| tokens.div_ceil(rows));
                let train_tokens = cfg.train.steps as usize * cfg.train.batch_size;
                let dashboard_opts = FeatureOptions::default();
                let held_need = bound(*held_out_tokens).map(|n| {
                    n.max(cfg.eval.ce_contexts)
                        .max(contexts_wanted(&dashboard_opts, *context))
                });
                let pack = |split, max| -> Result<_> {
                    let opts = pack_options(split, *context, *held_out_fraction, model_spec)?;
                    Ok(source.contexts(opts, max)?)
                };
                let train_ctx = pack(Split::Train, bound(train_tokens))?;
                let held_ctx = pack(Split::Heldout, held_need)?;
                let ce_n = cfg.eval.ce_contexts.min(held_ctx.len());
                let ce_tokens = Tensor::from_vec(
                    held_ctx.tokens[..ce_n * context].to_vec(),
                    (ce_n, *context),
                    device,
                )?;
                let opts = |repeat, buffer, shuffle_contexts, prefetch| OnTheFlyOptions {
                    batch_contexts: BATCH_CONTEXTS,
                    drop_bos: true,
                    buffer_tokens: buffer,
                    seed: cfg.seed,
                    repeat,
                    dtype: DType::F32,
                    shuffle_contexts,
                    prefetch,
                };
                // The held-out set: the first evaluated rows of the held-out split, read once.
                let heldout = match *held_out_tokens {
                    0 => None,
                    n => {
                        let held = heldout_rows(&model, &held_ctx, &hooks, n, BATCH_CONTEXTS)?;
                        check_held_out_rows("data.held_out_tokens", held.as_ref(), n)?;
                        held
                    }
                };
                let dashboards = DashboardPlan::model(
                    model.clone(),
                    hooks.clone(),
                    (&held_ctx, &train_ctx),
                    corpus,
                    &dashboard_opts,
                );
                let train = OnTheFly::new(
                    model.clone(),
                    train_ctx,
                    hooks.clone(),
                    opts(true, *buffer_tokens, *shuffle_contexts, *prefetch),
                )?;
                let splice = (ce_n > 0).then(|| Splice {
                    model,
                    hooks,
                    tokens: ce_tokens,
                });
                Ok(Self {
                    train: Box::new(train),
                    heldout,
                    splice,
                    dashboards,
                    detected_token_column: source.detected_token_column().map(str::to_string),
                    share: None,
                })
            }
        }
    }

    /// The next training batch as [B, L, d]; running dry is an error (model and shard sources repeat).
    /// In a group: this rank's rows of the next global batch of `batch` rows.
    pub fn next_train(&mut self, batch: usize) -> Result<Tensor> {
        let rows = match self.train.next_batch(batch)? {
            Some(b) if b.dim(0)? == batch => b,
            _ => {
                return Err(Error::Data(format!(
                    "the activation source ran out before a batch of {batch} tokens"
                )))
            }
        };
        let rows = match self.share {
            Some((rank, world)) => {
                let (offset, len) = rank_rows(batch, rank, world);
                rows.narrow(0, offset, len)?
            }
            None => rows,
        };
        with_layer_axis(rows)
    }
}

/// Rank `rank`'s rows of a batch of `batch` in a group of `world`: `(offset, count)`, the first
/// `batch % world` ranks taking one row more.
pub fn rank_rows(batch: usize, rank: usize, world: usize) -> (usize, usize) {
    let (base, extra) = (batch / world, batch % world);
    (
        rank * base + rank.min(extra),
        base + usize::from(rank < extra),
    )
}

/// The model must have the layers and positions the config asks for.
fn check_model_fit(layers: &[usize], context: usize, model: &Model) -> Result<()> {
    let depth = model.n_layer();
    if let Some(&l) = layers.iter().find(|&&l| l >= depth) {
        return Err(Error::config(
            "data.layers",
            format!(
                "layer {l} is past the model's depth: it has {depth} layers, valid layers are 0..={}",
                depth.saturating_sub(1)
            ),
        ));
    }
    model
        .check_context(context)
        .map_err(|message| Error::config("data.context", message))
}

/// A held-out set that came out smaller than FVU can be measured on is an error, not a number.
fn check_held_out_rows(key: &str, held: Option<&Tensor>, asked: usize) -> Result<()> {
    let rows = match held {
        Some(t) => t.dim(0)?,
        None => 0,
    };
    if rows < crate::config::MIN_HELD_OUT_TOKENS {
        return Err(Error::config(
            key,
            format!(
                "the held-out data gives {rows} of the {asked} tokens asked for; at least {} are needed \
                 to measure FVU (or set data.held_out_tokens = 0 to skip it)",
                crate::config::MIN_HELD_OUT_TOKENS
            ),
        ));
    }
    Ok(())
}

/// The SAE trainer as the shared training loop sees it.
struct SaeJob {
    trainer: Trainer,
    data: Data,
    /// The batch drawn for initialization, trained on first.
    pending: Option<Tensor>,
    /// The model has random weights: its CE-loss recovered means nothing (recorded beside it).
    random_weights: bool,
    /// The last step failed reading its batch, before anything was updated.
    data_failed: bool,
    /// Where the evaluations' latent-density histograms go.
    run_dir: harness::RunDir,
    /// Rank 0 (or one process) writes the checkpoints; the other ranks hold the same state.
    leads: bool,
}

impl harness::Trainer for SaeJob {
    type Error = Error;

    fn step(&mut self, ctx: StepContext) -> Result<StepOutput> {
        let batch = self.trainer.cfg.train.batch_size;
        let waited = std::time::Instant::now();
        let raw = match self.pending.take() {
            Some(b) => b,
            None => {
                let next = self.data.next_train(batch);
                self.data_failed = next.is_err();
                next?
            }
        };
        let data_wait_ms = 1e3 * waited.elapsed().as_secs_f64();
        let s = self.trainer.train_step(&raw, ctx.log)?;
        let mut m = Metrics::new();
        m.insert(harness::metrics::names::DATA_WAIT_MS.into(), data_wait_ms);
        m.insert("select_ms".into(), s.select_ms);
        if let Some(ms) = s.compare_ms {
            m.insert(harness::metrics::names::COMPARE_SELECT_MS.into(), ms);
        }
        m.insert("lr".into(), s.lr);
        m.insert("threshold".into(), s.threshold);
        if self.trainer.profile {
            m.insert("train_step_ms".into(), s.step_ms);
            for (name, ms) in s.stages.named() {
                m.insert(format!("stage_{name}_ms"), ms);
            }
        }
        if ctx.log {
            for (name, v) in [
                ("loss", s.loss),
                ("mse", s.mse),
                ("fvu", s.fvu),
                ("l0", s.l0),
                ("dead_fraction", s.dead_fraction),
                ("aux_loss", s.aux_loss),
                ("grad_norm", s.grad_norm),
            ] {
                m.insert(name.into(), v);
            }
            for (l, v) in s.layer_fvu.iter().enumerate() {
                m.insert(format!("fvu_layer{l}"), *v);
            }
        }
        Ok(StepOutput {
            tokens: batch as u64,
            metrics: m,
        })
    }

    fn save_checkpoint(&mut self, dir: &Path, _progress: &Progress) -> Result<()> {
        match self.leads {
            true => save_state(dir, &self.trainer),
            false => Ok(()),
        }
    }

    fn checkpoint_image(
        &mut self,
        _progress: &Progress,
    ) -> Result<Option<harness::CheckpointImage>> {
        let image = StateImage::of(&self.trainer)?;
        Ok(Some(Box::new(move |dir: &Path| {
            image.write(dir).map_err(harness::ImageError::from)
        })))
    }

    fn intact_after_failed_step(&self) -> bool {
        self.data_failed
    }

    fn eval(&mut self, progress: &Progress) -> Result<Metrics> {
        let mut m = Metrics::new();
        let held_rows = match &self.data.heldout {
            Some(t) => t.dim(0)?,
            None => 0,
        };
        m.insert("heldout_tokens".into(), held_rows as f64);
        if let Some(held) = &self.data.heldout {
            let e = self.trainer.evaluate(&with_layer_axis(held.clone())?)?;
            m.insert("heldout_fvu".into(), e.fvu);
            m.insert("heldout_mse".into(), e.mse);
            m.insert("heldout_l0".into(), e.l0);
            m.insert("heldout_fvu_threshold".into(), e.fvu_threshold);
            m.insert("heldout_l0_threshold".into(), e.l0_threshold);
            m.insert("heldout_rare_fraction".into(), e.rare_fraction);
            let density = harness::latent_density::LatentDensity::of(
                progress.step,
                e.tokens as u64,
                &e.latent_density,
            );
            density.write(&self.run_dir)?;
            for (l, v) in e.layer_fvu.iter().enumerate() {
                m.insert(format!("heldout_fvu_layer{l}"), *v);
            }
        }
        if let Some(splice) = &self.data.splice {
            let ce = ce_loss_recovered(&self.trainer, splice)?;
            m.insert("ce_clean".into(), ce.all.clean);
            m.insert("ce_sae".into(), ce.all.spliced);
            m.insert("ce_zero_ablation".into(), ce.all.zero);
            m.insert("ce_loss_recovered".into(), ce.all.recovered());
            if self.random_weights {
                m.insert("model_random_weights".into(), 1.0);
            }
            for (l, layer) in ce.per_layer.iter().enumerate() {
                m.insert(format!("ce_sae_layer{l}"), layer.spliced);
                m.insert(format!("ce_zero_ablation_layer{l}"), layer.zero);
                m.insert(format!("ce_loss_recovered_layer{l}"), layer.recovered());
            }
        }
        Ok(m)
    }
}

/// Splices the SAE (JumpReLU inference with the learned threshold) into positions 1.. of each of its hook
/// points; the first (BOS) position, excluded from training, keeps its activation.
pub fn ce_loss_recovered(trainer: &Trainer, splice: &Splice) -> Result<CeSplices> {
    let reconstruct = |raw: &Tensor| splice_reconstruction(trainer, raw).map_err(Into::into);
    Ok(ce_splices(
        &splice.model,
        &splice.tokens,
        &splice.hooks,
        &reconstruct,
    )?)
}

/// The SAE's reconstruction of raw activations [N, L, d], in the raw scale of each layer.
fn splice_reconstruction(trainer: &Trainer, raw: &Tensor) -> Result<Tensor> {
    let (n, layers, d) = raw.dims3()?;
    let x = trainer.prepare(raw)?;
    let theta = trainer.threshold.max(0.0);
    let (recon, _) = trainer.sae.reconstruct_threshold(&x, theta)?;
    let unscale: Vec<f32> = trainer.scales.iter().map(|s| (1.0 / s) as f32).collect();
    let unscale = Tensor::from_vec(unscale, (1, layers, 1), recon.device())?;
    Ok(recon.reshape((n, layers, d))?.broadcast_mul(&unscale)?)
}
