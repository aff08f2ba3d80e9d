//! The training-loop skeleton shared by every trainer: step counting from a resumed step, the progress bar,
//! metrics logging through the sink, periodic and final checkpoints, periodic and final evaluation, and a
//! clean stop on SIGINT / SIGTERM. It knows nothing of models: a trainer plugs in through [`Trainer`].
//!
//! A trainer that can copy its state off the device ([`Trainer::checkpoint_image`]) has its checkpoints
//! written on a thread of their own while training goes on: the loop pays for the copy, not for the disk.
//! One write is in flight at a time; the next checkpoint, a stop, an error and the end of the run wait for
//! it, and the final checkpoint is written while the final evaluation runs.

use crate::atomic::{sync_dir, write_json_atomic};
use crate::metrics::{names, Metrics, MetricsSink, Record};
use crate::progress::{human, ProgressLines};
use crate::ranks::RankGroup;
use crate::run_dir::{Checkpoint, Progress, RunDir, PROGRESS_FILE};
use crate::{config::LogConfig, error::Error};
use indicatif::{ProgressBar, ProgressStyle};
use runtime::signal::StopSignal;
use std::fs;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the loop tells a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepContext {
    /// Steps completed before this one (0 for the first step of a fresh run).
    pub step: u64,
    /// Whether this step's metrics will be logged: metrics that cost extra work (a device sync, a
    /// reduction) may be skipped when false.
    pub log: bool,
}

/// What a step reports back.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepOutput {
    /// Training tokens this step consumed.
    pub tokens: u64,
    /// Metrics of this step (loss, select_ms, ...). The loop adds step_ms, select_share, tokens_per_s.
    pub metrics: Metrics,
}

pub use crate::error::ImageError;

/// A copy of a trainer's state, taken when the checkpoint is due: called with an empty folder (on the
/// writer thread), it writes there what [`Trainer::save_checkpoint`] would have.
pub type CheckpointImage = Box<dyn FnOnce(&Path) -> Result<(), ImageError> + Send>;

/// A trainer the loop drives. Errors of the loop's own I/O reach the caller as `T::Error` through
/// `From<harness::Error>`.
pub trait Trainer {
    type Error: From<Error> + std::fmt::Display;

    /// Runs one optimizer step. Its wall time is the logged step_ms, so work queued on a device must be
    /// finished (synchronized) before returning.
    fn step(&mut self, ctx: StepContext) -> Result<StepOutput, Self::Error>;

    /// Writes everything a resume needs into `dir`, an empty folder. The loop writes `progress.json`
    /// beside it, fsyncs the folder and renames it into place, so a crash never leaves half a checkpoint.
    fn save_checkpoint(&mut self, dir: &Path, progress: &Progress) -> Result<(), Self::Error>;

    /// The state `save_checkpoint` writes, copied now (on the host, or on the device for the writer to
    /// move), to be written on another thread while the next steps run; the copy's memory is held until
    /// it is written. `None`, the default: the loop calls `save_checkpoint` and waits for it.
    fn checkpoint_image(
        &mut self,
        _progress: &Progress,
    ) -> Result<Option<CheckpointImage>, Self::Error> {
        Ok(None)
    }

    /// Evaluates on held-out data; logged as an "eval" record.
    fn eval(&mut self, _progress: &Progress) -> Result<Metrics, Self::Error> {
        Ok(Metrics::new())
    }

    /// Whether the step that just failed left the state of the last completed step untouched (its
    /// data could not be read, say), so that a checkpoint of it can be written before the run stops.
    fn intact_after_failed_step(&self) -> bool {
        false
    }
}

/// Checkpoints a run keeps unless its `train.keep_checkpoints` says otherwise: the newest two.
pub const DEFAULT_KEEP_CHECKPOINTS: usize = 2;

/// How the loop runs.
#[derive(Debug, Clone, PartialEq)]
pub struct LoopConfig {
    /// Steps of the whole run (a resumed run still counts from 0 towards this).
    pub total_steps: u64,
    /// Log every N steps; each record averages the metrics of its N steps.
    pub log_every: u64,
    /// Checkpoint every N steps; 0: only at the end and on a stop.
    pub checkpoint_every: u64,
    /// Evaluate every N steps; 0: only at the end.
    pub eval_every: u64,
    /// Keep only the newest N checkpoints; 0 keeps all.
    pub keep_checkpoints: usize,
    /// Evaluate when the run completes.
    pub final_eval: bool,
    /// Show the progress bar (hidden anyway when stderr is not a terminal).
    pub progress_bar: bool,
    /// Metrics shown in the progress bar's message, e.g. ["loss"].
    pub progress_metrics: Vec<String>,
    /// Interval of the plain progress lines printed instead of the bar when stderr is not a terminal.
    pub progress_every: Duration,
}

impl LoopConfig {
    /// A loop of `total_steps` with logging taken from the `[log]` section; checkpoints only at the end.
    pub fn new(total_steps: u64, log: &LogConfig) -> LoopConfig {
        LoopConfig {
            total_steps,
            log_every: log.every.max(1),
            checkpoint_every: 0,
            eval_every: 0,
            keep_checkpoints: DEFAULT_KEEP_CHECKPOINTS,
            final_eval: true,
            progress_bar: log.progress,
            progress_metrics: vec![names::LOSS.into()],
            progress_every: Duration::from_secs_f64(log.progress_every_s.max(0.0)),
        }
    }
}

/// How the loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// All `total_steps` ran.
    Completed,
    /// A stop was requested (SIGINT, SIGTERM); a checkpoint was written, `--resume` continues.
    Stopped,
}

/// The loop's result.
#[derive(Debug, Clone, PartialEq)]
pub struct LoopSummary {
    pub outcome: Outcome,
    pub progress: Progress,
    pub final_eval: Option<Metrics>,
    pub last_checkpoint: Option<PathBuf>,
    /// Wall time the loop spent on checkpoints: copying state, writing it, waiting for a write.
    pub checkpoint_time: Duration,
}

/// Runs `trainer` from `start` (default for a fresh run, the checkpoint's progress for a resume) to
/// `cfg.total_steps`, or until `stop` is requested.
pub fn run<T: Trainer>(
    trainer: &mut T,
    run_dir: &RunDir,
    sink: &MetricsSink,
    cfg: &LoopConfig,
    start: Progress,
    stop: &StopSignal,
) -> Result<LoopSummary, T::Error> {
    run_in(trainer, run_dir, Some(sink), cfg, start, stop, None)
}

/// [`run`] as one rank of `group`. Rank 0 (which passes the `sink`) logs, shows progress, evaluates
/// and owns the checkpoint folders; every rank writes its part of each checkpoint into the folder
/// rank 0 prepared, and all ranks stop after the same step. In a group a trainer's
/// [`Trainer::eval`] runs on rank 0 alone, so it must not call collectives.
pub fn run_in<T: Trainer>(
    trainer: &mut T,
    run_dir: &RunDir,
    sink: Option<&MetricsSink>,
    cfg: &LoopConfig,
    start: Progress,
    stop: &StopSignal,
    group: Option<&RankGroup>,
) -> Result<LoopSummary, T::Error> {
    let leads = group.is_none_or(RankGroup::leads);
    let began = Instant::now();
    let wall = |extra: Duration| start.wall_s + extra.as_secs_f64();
    let bar = if leads {
        progress_bar(cfg, start.step)
    } else {
        ProgressBar::hidden()
    };
    let mut lines = ProgressLines::for_log(
        cfg.progress_bar,
        cfg.progress_every,
        cfg.total_steps,
        start.step,
        &cfg.progress_metrics,
    )
    .filter(|_| leads);
    let mut progress = start;
    let mut window = Window::default();
    let mut checkpoints = Checkpoints::new(run_dir, cfg.keep_checkpoints, start.step, group);
    let watchdog = group.and_then(RankGroup::watchdog);
    let log_to = |record: Record| {
        if let Some(sink) = sink {
            sink.log(record);
        }
    };
    let flush = || sink.map_or(Ok(()), MetricsSink::flush);
    let log_every = cfg.log_every.max(1);

    while progress.step < cfg.total_steps {
        let done_after = progress.step + 1;
        let log = done_after.is_multiple_of(log_every) || done_after == cfg.total_steps;
        let t0 = Instant::now();
        let out = match trainer.step(StepContext {
            step: progress.step,
            log,
        }) {
            Ok(out) => out,
            Err(e) => {
                bar.finish_and_clear();
                // The write in flight lands first.
                if let Err(earlier) = checkpoints.wait() {
                    eprintln!("checkpoint: {earlier}");
                }
                // In a group the other ranks are inside the step's collectives: no checkpoint.
                if group.is_none()
                    && trainer.intact_after_failed_step()
                    && progress.step > checkpoints.on_disk
                {
                    progress.wall_s = wall(began.elapsed());
                    match checkpoints.save_now(trainer, &progress) {
                        Ok(dir) => eprintln!(
                            "step {} failed; the state after step {} is checkpointed in {} \
                             (resume with --resume once the cause is fixed)",
                            progress.step + 1,
                            progress.step,
                            dir.display()
                        ),
                        Err(_) => eprintln!(
                            "step {} failed, and so did checkpointing step {}",
                            progress.step + 1,
                            progress.step
                        ),
                    }
                }
                let _ = flush();
                return Err(e);
            }
        };
        let step_time = t0.elapsed();
        if let Some(dog) = &watchdog {
            dog.beat(done_after);
        }
        progress.step = done_after;
        progress.tokens += out.tokens;
        progress.wall_s = wall(began.elapsed());
        window.add(&out, step_time);
        bar.inc(1);

        let stopping = match group {
            Some(g) => g.any_stop(stop.is_requested())?,
            None => stop.is_requested(),
        };
        if log || stopping {
            let mut metrics = window.take();
            if progress.wall_s > 0.0 {
                metrics.insert(
                    names::RUN_TOKENS_PER_S.into(),
                    progress.tokens as f64 / progress.wall_s,
                );
            }
            bar.set_message(bar_message(&metrics, &cfg.progress_metrics));
            if let Some(lines) = &mut lines {
                lines.record(progress.step, &metrics);
            }
            log_to(Record::train(
                progress.step,
                progress.tokens,
                progress.wall_s,
                metrics,
            ));
        }
        let at_end = progress.step == cfg.total_steps;
        if leads
            && cfg.eval_every > 0
            && progress.step.is_multiple_of(cfg.eval_every)
            && !at_end
            && !stopping
        {
            let metrics = bar.suspend(|| trainer.eval(&progress))?;
            log_to(Record::eval(
                progress.step,
                progress.tokens,
                progress.wall_s,
                metrics,
            ));
        }
        if stopping {
            progress.wall_s = wall(began.elapsed());
            checkpoints.save_now(trainer, &progress)?;
            bar.finish_and_clear();
            flush()?;
            return Ok(checkpoints.summary(Outcome::Stopped, progress, None));
        }
        let periodic =
            cfg.checkpoint_every > 0 && progress.step.is_multiple_of(cfg.checkpoint_every);
        if periodic || at_end {
            progress.wall_s = wall(began.elapsed());
            checkpoints.start(trainer, &progress)?;
        }
    }
    bar.finish();
    // The other ranks are done: rank 0's evaluation may take longer than a step.
    drop(watchdog);

    // The final checkpoint is being written meanwhile.
    let final_eval = if cfg.final_eval && leads {
        progress.wall_s = wall(began.elapsed());
        let metrics = trainer.eval(&progress)?;
        log_to(Record::eval(
            progress.step,
            progress.tokens,
            progress.wall_s,
            metrics.clone(),
        ));
        Some(metrics)
    } else {
        None
    };
    checkpoints.wait()?;
    flush()?;
    Ok(checkpoints.summary(Outcome::Completed, progress, final_eval))
}

/// The loop's checkpoints: written on a thread of their own (one in flight) when the trainer gives an
/// image of its state, in place otherwise. Dropped with a write in flight (the loop returned an error),
/// it waits for that write.
struct Checkpoints<'a> {
    run_dir: &'a RunDir,
    group: Option<&'a RankGroup>,
    keep: usize,
    /// The step of the newest checkpoint on disk (a resumed run starts at one).
    on_disk: u64,
    last: Option<PathBuf>,
    in_flight: Option<(u64, JoinHandle<Result<PathBuf, Error>>)>,
    time: Duration,
}

impl<'a> Checkpoints<'a> {
    fn new(run_dir: &'a RunDir, keep: usize, on_disk: u64, group: Option<&'a RankGroup>) -> Self {
        Self {
            run_dir,
            group,
            keep,
            on_disk,
            last: None,
            in_flight: None,
            time: Duration::ZERO,
        }
    }

    /// Waits for the write in flight, if any.
    fn wait(&mut self) -> Result<(), Error> {
        let Some((step, handle)) = self.in_flight.take() else {
            return Ok(());
        };
        let began = Instant::now();
        let joined = handle.join().unwrap_or_else(|_| {
            Err(Error::RunDir {
                path: self.run_dir.checkpoints_dir(),
                message: "the checkpoint writer thread panicked".into(),
            })
        });
        self.time += began.elapsed();
        self.last = Some(joined?);
        self.on_disk = step;
        Ok(())
    }

    /// Checkpoints `progress`, after the write in flight: on a thread of its own from the trainer's
    /// image of its state, or in place when it gives none.
    fn start<T: Trainer>(&mut self, trainer: &mut T, progress: &Progress) -> Result<(), T::Error> {
        self.wait()?;
        let began = Instant::now();
        if let Some(group) = self.group {
            let written = self.save_in_group(trainer, progress, group);
            self.time += began.elapsed();
            return written;
        }
        let image = trainer.checkpoint_image(progress);
        let written = match image? {
            Some(image) => self.spawn(image, *progress).map_err(T::Error::from),
            None => save_checkpoint(trainer, self.run_dir, progress, self.keep).map(|dir| {
                self.last = Some(dir);
                self.on_disk = progress.step;
            }),
        };
        self.time += began.elapsed();
        written
    }

    /// Every rank writes its part into the folder rank 0 prepared; rank 0 then completes it. Each
    /// phase ends with every rank's outcome, so that all go on or all fail together.
    fn save_in_group<T: Trainer>(
        &mut self,
        trainer: &mut T,
        progress: &Progress,
        group: &RankGroup,
    ) -> Result<(), T::Error> {
        let target = self.run_dir.checkpoint_dir(progress.step);
        let prepared = if group.leads() {
            prepare_checkpoint(self.run_dir, progress.step)
        } else {
            Ok(PathBuf::new())
        };
        group.all_succeeded(
            &format!("preparing checkpoint {}", target.display()),
            &outcome(&prepared),
        )?;
        let tmp = group.share_path(&prepared?)?;
        let written = trainer.save_checkpoint(&tmp, progress);
        let shared = group.all_succeeded(
            &format!("writing checkpoint {}", target.display()),
            &outcome(&written),
        );
        let completed = match shared {
            Ok(()) if group.leads() => {
                complete_checkpoint(self.run_dir, progress, self.keep, &tmp).map(|_| ())
            }
            Ok(()) => Ok(()),
            Err(e) => {
                if group.leads() {
                    // A full disk must not keep the half-written folder: it holds the space a retry needs.
                    let _ = fs::remove_dir_all(&tmp);
                }
                return Err(e.into());
            }
        };
        group.all_succeeded(
            &format!("completing checkpoint {}", target.display()),
            &outcome(&completed),
        )?;
        self.last = Some(target);
        self.on_disk = progress.step;
        Ok(())
    }

    fn spawn(&mut self, image: CheckpointImage, progress: Progress) -> Result<(), Error> {
        let (run_dir, keep) = (self.run_dir.clone(), self.keep);
        let target = run_dir.checkpoint_dir(progress.step);
        let handle = std::thread::Builder::new()
            .name("checkpoint-writer".into())
            .spawn(move || {
                write_checkpoint(&run_dir, &progress, keep, |tmp| {
                    image(tmp).map_err(|cause| Error::CheckpointWrite {
                        path: target.clone(),
                        cause,
                    })
                })
            })
            .map_err(Error::io(
                "starting the checkpoint writer for",
                self.run_dir.path(),
            ))?;
        self.in_flight = Some((progress.step, handle));
        Ok(())
    }

    /// Checkpoints `progress` and waits until it is on disk (a stop, a failed step).
    fn save_now<T: Trainer>(
        &mut self,
        trainer: &mut T,
        progress: &Progress,
    ) -> Result<PathBuf, T::Error> {
        self.start(trainer, progress)?;
        self.wait()?;
        Ok(self
            .last
            .clone()
            .unwrap_or_else(|| self.run_dir.checkpoint_dir(progress.step)))
    }

    fn summary(
        &mut self,
        outcome: Outcome,
        progress: Progress,
        final_eval: Option<Metrics>,
    ) -> LoopSummary {
        LoopSummary {
            outcome,
            progress,
            final_eval,
            last_checkpoint: self.last.clone(),
            checkpoint_time: self.time,
        }
    }
}

impl Drop for Checkpoints<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.wait() {
            eprintln!("checkpoint: {e}");
        }
    }
}

/// Writes a checkpoint folder for `progress` atomically and points `checkpoints/latest` at it.
pub fn save_checkpoint<T: Trainer>(
    trainer: &mut T,
    run_dir: &RunDir,
    progress: &Progress,
    keep: usize,
) -> Result<PathBuf, T::Error> {
    write_checkpoint(run_dir, progress, keep, |tmp| {
        trainer.save_checkpoint(tmp, progress)
    })
}

/// Has `write` fill a temporary folder, adds `progress.json`, syncs it, renames it into place as the
/// checkpoint of `progress.step`, points `checkpoints/latest` at it and prunes to `keep`.
fn write_checkpoint<E: From<Error>>(
    run_dir: &RunDir,
    progress: &Progress,
    keep: usize,
    write: impl FnOnce(&Path) -> Result<(), E>,
) -> Result<PathBuf, E> {
    let tmp = prepare_checkpoint(run_dir, progress.step)?;
    if let Err(e) = write(&tmp) {
        // A full disk must not keep the half-written folder: it holds the space a retry needs.
        let _ = fs::remove_dir_all(&tmp);
        return Err(e);
    }
    Ok(complete_checkpoint(run_dir, progress, keep, &tmp)?)
}

/// An empty temporary folder for the checkpoint of `step`, after removing what earlier processes left
/// half-written.
fn prepare_checkpoint(run_dir: &RunDir, step: u64) -> Result<PathBuf, Error> {
    let target = run_dir.checkpoint_dir(step);
    let parent = run_dir.checkpoints_dir();
    fs::create_dir_all(&parent).map_err(Error::io("creating directory", &parent))?;
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    remove_partial_checkpoints(&parent)?;
    let tmp = parent.join(format!(".{name}.{}.tmp", std::process::id()));
    fs::create_dir_all(&tmp).map_err(Error::io("creating directory", &tmp))?;
    Ok(tmp)
}

/// Adds `progress.json` to the written folder `tmp`, syncs it, renames it into place, points
/// `checkpoints/latest` at it and prunes to `keep`; a failure removes `tmp`.
fn complete_checkpoint(
    run_dir: &RunDir,
    progress: &Progress,
    keep: usize,
    tmp: &Path,
) -> Result<PathBuf, Error> {
    let target = run_dir.checkpoint_dir(progress.step);
    let parent = run_dir.checkpoints_dir();
    let written =
        write_json_atomic(&tmp.join(PROGRESS_FILE), progress).and_then(|()| sync_tree(tmp));
    if let Err(e) = written {
        let _ = fs::remove_dir_all(tmp);
        return Err(e);
    }
    if target.exists() {
        // Re-saving the same step (e.g. a run resumed at its last step): the new folder replaces it.
        fs::remove_dir_all(&target).map_err(Error::io("replacing", &target))?;
    }
    fs::rename(tmp, &target).map_err(Error::io("renaming into place", &target))?;
    sync_dir(&parent)?;
    run_dir.set_latest_checkpoint(&target)?;
    prune(run_dir, keep)?;
    Ok(target)
}

/// Removes checkpoint folders that an earlier process left half-written (`.step-*.tmp`); they were never
/// renamed into place, so nothing refers to them.
fn remove_partial_checkpoints(parent: &Path) -> Result<(), Error> {
    for entry in fs::read_dir(parent).map_err(Error::io("listing", parent))? {
        let entry = entry.map_err(Error::io("listing", parent))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(".step-") && name.ends_with(".tmp") {
            let path = entry.path();
            fs::remove_dir_all(&path).map_err(Error::io("removing partial checkpoint", &path))?;
        }
    }
    Ok(())
}

/// A part's outcome as every rank reports it: nothing, or why it failed.
fn outcome<T, E: std::fmt::Display>(r: &Result<T, E>) -> Result<(), String> {
    r.as_ref().map(|_| ()).map_err(|e| e.to_string())
}

/// Loads the latest checkpoint of `run_dir` for a resume, or says clearly that there is none.
pub fn resume_point(run_dir: &RunDir) -> Result<Checkpoint, Error> {
    run_dir.latest_checkpoint()?.ok_or_else(|| Error::RunDir {
        path: run_dir.checkpoints_dir(),
        message: "no complete checkpoint to resume from".into(),
    })
}

fn sync_tree(dir: &Path) -> Result<(), Error> {
    for entry in fs::read_dir(dir).map_err(Error::io("listing", dir))? {
        let path = entry.map_err(Error::io("listing", dir))?.path();
        if path.is_dir() {
            sync_tree(&path)?;
        } else {
            fs::File::open(&path)
                .and_then(|f| f.sync_all())
                .map_err(Error::io("syncing", &path))?;
        }
    }
    sync_dir(dir)
}

fn prune(run_dir: &RunDir, keep: usize) -> Result<(), Error> {
    if keep == 0 {
        return Ok(());
    }
    let all = run_dir.checkpoints()?;
    for old in all.iter().take(all.len().saturating_sub(keep)) {
        fs::remove_dir_all(&old.dir).map_err(Error::io("removing old checkpoint", &old.dir))?;
    }
    Ok(())
}

/// Sums of the steps since the last log record.
#[derive(Default)]
struct Window {
    steps: u64,
    tokens: u64,
    step_secs: f64,
    sums: Metrics,
    counts: std::collections::BTreeMap<String, u64>,
}

impl Window {
    fn add(&mut self, out: &StepOutput, step_time: Duration) {
        self.steps += 1;
        self.tokens += out.tokens;
        self.step_secs += step_time.as_secs_f64();
        for (name, value) in &out.metrics {
            *self.sums.entry(name.clone()).or_insert(0.0) += value;
            *self.counts.entry(name.clone()).or_insert(0) += 1;
        }
    }

    /// Mean of each metric over the steps that reported it, plus the loop's own timing metrics.
    fn take(&mut self) -> Metrics {
        let window = std::mem::take(self);
        let mut metrics: Metrics = window
            .sums
            .iter()
            .map(|(name, sum)| (name.clone(), sum / window.counts[name] as f64))
            .collect();
        if window.steps > 0 {
            let step_ms = 1e3 * window.step_secs / window.steps as f64;
            metrics.insert(names::STEP_MS.into(), step_ms);
            for (part, share) in [
                (names::SELECT_MS, names::SELECT_SHARE),
                (names::DATA_WAIT_MS, names::DATA_WAIT_SHARE),
            ] {
                if let Some(ms) = metrics.get(part).copied() {
                    if step_ms > 0.0 {
                        metrics.insert(share.into(), ms / step_ms);
                    }
                }
            }
            if window.step_secs > 0.0 && window.tokens > 0 {
                metrics.insert(
                    names::TOKENS_PER_S.into(),
                    window.tokens as f64 / window.step_secs,
                );
            }
        }
        metrics
    }
}

fn progress_bar(cfg: &LoopConfig, position: u64) -> ProgressBar {
    if !cfg.progress_bar {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(cfg.total_steps);
    let style = ProgressStyle::with_template(
        "{pos}/{len} steps [{elapsed_precise}, ETA {eta}] {bar:20.cyan/blue} {wide_msg}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ");
    bar.set_style(style);
    bar.set_position(position);
    bar.reset_eta();
    bar
}

fn bar_message(metrics: &Metrics, shown: &[String]) -> String {
    let mut parts = Vec::new();
    if let Some(tps) = metrics.get(names::TOKENS_PER_S) {
        parts.push(format!("{} tok/s", human(*tps)));
    }
    if let Some(ms) = metrics.get(names::STEP_MS) {
        parts.push(format!("{ms:.1} ms/step"));
    }
    for name in shown {
        if let Some(v) = metrics.get(name) {
            parts.push(format!("{name} {v:.4}"));
        }
    }
    parts.join(", ")
}
