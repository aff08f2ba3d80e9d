//! The run setup every training command shares: config → run directory (new, resumed, or refused) →
//! lock → metadata → metrics sink → [`train_loop::run`]. A trainer supplies only what differs: its
//! config, its data and model, and how it builds or reloads its state; the command then writes what
//! follows a completed run (its evaluation and `eval`'s report).
//!
//! ```text
//! let launch = Launch::open(spec)?;                 // directory, lock, resume compatibility
//! let (mut job, start) = match launch.resume_from() {
//!     Some(ckpt) => (reload(&ckpt.dir)?, ckpt.progress),
//!     None => (build()?, Progress::default()),      // a failure here removes the fresh directory
//! };
//! let finished = launch.train(&mut job, &loop_cfg, start, details, &stop)?;
//! if !finished.stopped() { eval::report::write_run_report(&run)?; }
//! std::process::exit(finished.exit_code());         // 0, or 128 + signal after a stop
//! ```

use crate::config::LogConfig;
use crate::error::{Error, Result};
use crate::metrics::{MetricsSink, SinkOptions};
use crate::output_path::check_output_dir;
use crate::provenance::{BuildInfo, Provenance};
use crate::ranks::RankGroup;
use crate::run_dir::{
    Checkpoint, Progress, RunDir, RunMeta, CHECKPOINTS_DIR, CONFIG_JSON_FILE, CONFIG_TOML_FILE,
    METRICS_FILE, REPORT_FILE, RUN_FILES, RUN_META_FILE,
};
use crate::train_loop::{self, LoopConfig, LoopSummary, Outcome, StepContext, StepOutput, Trainer};
use crate::Metrics;
use runtime::config::ConfigSource;
use runtime::lock::{shell_quote, DirLock, LOCK_FILE};
use runtime::signal::StopSignal;
use std::fs;
use std::path::{Path, PathBuf};

/// What a command tells the launcher about its run.
#[derive(Debug, Clone)]
pub struct LaunchSpec {
    /// The command's name, e.g. `train-sae`.
    pub command: String,
    /// The kind of training, recorded in run.json (`sae`, `finetune`).
    pub task: String,
    /// The config file and its `--set` overrides.
    pub source: ConfigSource,
    /// The config after defaults were resolved (saved as config.json, compared on resume).
    pub resolved: serde_json::Value,
    /// The config's `name`: the prefix of a default run directory.
    pub name: String,
    /// The selector kind (`profk`, `sort`, `radix`): the directory's second part and a W&B tag.
    pub selector: String,
    /// Dotted keys of the resolved config that a resume may change (`train.steps`, `log`...).
    /// Everything else must equal what the run was started with.
    pub resumable: Vec<String>,
    /// `--out DIR`.
    pub out: Option<PathBuf>,
    /// `--resume`.
    pub resume: bool,
    /// Parent of default run directories (`runs`).
    pub runs_root: PathBuf,
    pub log: LogConfig,
    /// The binary's build (version, commit, features), recorded in run.json.
    pub build: BuildInfo,
    /// `sha256:<hex>` of the model weights the run reads (see [`Provenance::model_sha256`]).
    pub model_sha256: Option<String>,
}

impl LaunchSpec {
    /// `<runs_root>/<name>-<selector>-<timestamp>`'s stem.
    pub fn default_stem(&self) -> String {
        format!("{}-{}", self.name, self.selector)
    }
}

/// A run directory opened and locked for one run (by rank 0 of a group; the other ranks follow it).
#[derive(Debug)]
pub struct Launch {
    spec: LaunchSpec,
    run: RunDir,
    resume_from: Option<Checkpoint>,
    /// For a fresh run: how to take the directory back if the run fails before training a step.
    fresh: Option<Fresh>,
    /// The ranks of a run of several; `None` for one process.
    group: Option<RankGroup>,
    // Declared last: dropped after `Drop::drop` has cleaned up a failed start. Held by rank 0 only.
    lock: Option<DirLock>,
}

#[derive(Debug)]
struct Fresh {
    /// The launcher created the directory itself (then it removes it whole).
    created_dir: bool,
    trained: bool,
}

impl Launch {
    /// Resolves and locks the run directory: `--resume` opens the run in `--out` and checks that the
    /// config still describes it; otherwise `--out DIR` (which must not hold a run) or a new
    /// timestamped directory under `runs_root`. Nothing but the lock file is written yet.
    pub fn open(spec: LaunchSpec) -> Result<Launch> {
        if spec.resume {
            let out = spec.out.as_deref().ok_or_else(|| {
                Error::config("--resume", "needs --out DIR naming the run to continue")
            })?;
            let run = RunDir::open_existing(out)?;
            let lock = DirLock::acquire(run.path())?;
            check_resumable(&run, &spec)?;
            let ckpt = train_loop::resume_point(&run)?;
            return Ok(Launch {
                spec,
                run,
                resume_from: Some(ckpt),
                fresh: None,
                group: None,
                lock: Some(lock),
            });
        }
        let (dir, created_dir) = match &spec.out {
            Some(out) => {
                check_output_dir(out, &RUN_FILES, &[spec.source.path.as_path()])?;
                let created = !out.exists();
                fs::create_dir_all(out).map_err(Error::io("creating directory", out))?;
                (out.clone(), created)
            }
            None => (
                RunDir::create(&spec.runs_root, &spec.default_stem())?
                    .path()
                    .to_path_buf(),
                true,
            ),
        };
        let undo = |e: Error| {
            if created_dir {
                let _ = fs::remove_dir_all(&dir);
            }
            e
        };
        // Locked before looking inside, so two fresh starts on one --out cannot both pass the check.
        let lock = DirLock::acquire(&dir).map_err(|e| undo(e.into()))?;
        let run = match RunDir::create_at(&dir) {
            Ok(run) => run,
            Err(e) => {
                drop(lock);
                return Err(undo(e));
            }
        };
        Ok(Launch {
            spec,
            run,
            resume_from: None,
            fresh: Some(Fresh {
                created_dir,
                trained: false,
            }),
            group: None,
            lock: Some(lock),
        })
    }

    /// [`Launch::open`] for one rank of `group`: rank 0 opens (or refuses) the run directory and tells
    /// the others where it is and which checkpoint a resume continues from; they follow it and write
    /// nothing there but their parts of the checkpoints. A group of one opens as one process does.
    pub fn open_in(spec: LaunchSpec, group: Option<RankGroup>) -> Result<Launch> {
        let Some(group) = group.filter(|g| g.world() > 1) else {
            return Launch::open(spec);
        };
        if !group.leads() {
            let (dir, resume_from) = group.share_opening(None)?;
            return Ok(Launch {
                spec,
                run: RunDir::opened_by_rank0(&dir),
                resume_from,
                fresh: None,
                group: Some(group),
                lock: None,
            });
        }
        let opened = Launch::open(spec);
        let told = opened
            .as_ref()
            .map(|l| (l.run.path().to_path_buf(), l.resume_from.clone()))
            .map_err(|e| Error::Ranks(e.to_string()));
        group.share_opening(Some(&told))?;
        let mut launch = opened?;
        launch.group = Some(group);
        Ok(launch)
    }

    pub fn run_dir(&self) -> &RunDir {
        &self.run
    }

    /// The checkpoint a resumed run continues from; `None` for a fresh run.
    pub fn resume_from(&self) -> Option<&Checkpoint> {
        self.resume_from.as_ref()
    }

    /// The lock file held for the run (by rank 0 in a group).
    pub fn lock_path(&self) -> Option<&Path> {
        self.lock.as_ref().map(DirLock::path)
    }

    /// Whether this process writes the run's files: one process, or rank 0 of a group.
    pub fn leads(&self) -> bool {
        self.group.as_ref().is_none_or(RankGroup::leads)
    }

    /// Writes the run's identity and config (fresh runs), opens the metrics sink, runs the loop from
    /// `start` and closes the sink.
    pub fn train<T: Trainer>(
        mut self,
        trainer: &mut T,
        loop_cfg: &LoopConfig,
        start: Progress,
        details: serde_json::Map<String, serde_json::Value>,
        stop: &StopSignal,
    ) -> std::result::Result<Finished, T::Error> {
        if !self.leads() {
            let mut quiet = loop_cfg.clone();
            quiet.progress_bar = false;
            let summary = train_loop::run_in(
                trainer,
                &self.run,
                None,
                &quiet,
                start,
                stop,
                self.group.as_ref(),
            )?;
            return Ok(Finished {
                run_dir: self.run.path().to_path_buf(),
                exit_code: match summary.outcome {
                    Outcome::Completed => 0,
                    Outcome::Stopped => stop.exit_code(),
                },
                summary,
            });
        }
        let previous = if self.fresh.is_some() {
            RunMeta::default()
        } else {
            self.run.read_meta()?
        };
        let here = Provenance::current(self.spec.build.clone(), self.spec.model_sha256.clone());
        let mut earlier_provenance = previous.earlier_provenance.clone();
        if let Some(before) = previous.provenance.as_ref().filter(|p| **p != here) {
            let changed: Vec<&str> = before.differences(&here).iter().map(|d| d.0).collect();
            if !changed.is_empty() {
                eprintln!(
                    "warning: this run resumes under other conditions than it ran before ({}); \
                     run.json keeps both and the report marks it",
                    changed.join(", ")
                );
            }
            earlier_provenance.push(before.clone());
        }
        let meta = RunMeta {
            name: self.run.name(),
            config_name: self.spec.source.name(),
            selector: self.spec.selector.clone(),
            task: self.spec.task.clone(),
            details,
            provenance: Some(here),
            earlier_provenance,
            ..previous
        };
        self.run.write_meta(&meta)?;
        if self.fresh.is_some() {
            self.run
                .write_config(&self.spec.source.effective_text(), &self.spec.resolved)?;
        }
        let meta = self.run.read_meta()?;
        let sink_options = SinkOptions::for_run(&self.run, &meta, &self.spec.log);
        let sink = match self.resume_from {
            Some(_) => MetricsSink::resume(&self.run, start.step, sink_options)?,
            None => MetricsSink::create(&self.run, sink_options)?,
        };
        let mut watched = Watched {
            inner: trainer,
            trained: false,
        };
        let result = train_loop::run_in(
            &mut watched,
            &self.run,
            Some(&sink),
            loop_cfg,
            start,
            stop,
            self.group.as_ref(),
        );
        if let Some(fresh) = &mut self.fresh {
            fresh.trained = watched.trained;
        }
        let summary = result?;
        sink.finish()?;
        if summary.outcome != Outcome::Completed {
            eprintln!(
                "{}: stopped at step {} with checkpoint {}\nresume with: {}",
                stop.describe(),
                summary.progress.step,
                summary
                    .last_checkpoint
                    .as_deref()
                    .map_or_else(String::new, |d| d.display().to_string()),
                resume_command(self.run.path())
            );
        }
        Ok(Finished {
            run_dir: self.run.path().to_path_buf(),
            exit_code: match summary.outcome {
                Outcome::Completed => 0,
                Outcome::Stopped => stop.exit_code(),
            },
            summary,
        })
    }
}

impl Drop for Launch {
    /// A fresh run that failed before training a step leaves nothing behind that would refuse a rerun.
    fn drop(&mut self) {
        let Some(fresh) = &self.fresh else { return };
        if fresh.trained || self.run.latest_checkpoint().ok().flatten().is_some() {
            return;
        }
        let dir = self.run.path();
        if fresh.created_dir {
            let _ = fs::remove_dir_all(dir);
            return;
        }
        for name in [
            RUN_META_FILE,
            CONFIG_TOML_FILE,
            CONFIG_JSON_FILE,
            METRICS_FILE,
            REPORT_FILE,
            LOCK_FILE,
        ] {
            let _ = fs::remove_file(dir.join(name));
        }
        let _ = fs::remove_dir_all(dir.join(CHECKPOINTS_DIR));
    }
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct Finished {
    pub run_dir: PathBuf,
    pub summary: LoopSummary,
    exit_code: i32,
}

impl Finished {
    pub fn stopped(&self) -> bool {
        self.summary.outcome == Outcome::Stopped
    }

    /// The process's exit status: 0 for a completed run, 128 + signal (130 SIGINT, 143 SIGTERM) for
    /// one stopped by a signal, so a script can tell them apart.
    pub fn exit_code(&self) -> i32 {
        self.exit_code
    }
}

/// Records whether the loop completed a step, so a failure before the first one can be undone.
struct Watched<'a, T> {
    inner: &'a mut T,
    trained: bool,
}

impl<T: Trainer> Trainer for Watched<'_, T> {
    type Error = T::Error;

    fn step(&mut self, ctx: StepContext) -> std::result::Result<StepOutput, T::Error> {
        let out = self.inner.step(ctx)?;
        self.trained = true;
        Ok(out)
    }

    fn save_checkpoint(
        &mut self,
        dir: &Path,
        progress: &Progress,
    ) -> std::result::Result<(), T::Error> {
        self.inner.save_checkpoint(dir, progress)
    }

    fn checkpoint_image(
        &mut self,
        progress: &Progress,
    ) -> std::result::Result<Option<crate::CheckpointImage>, T::Error> {
        self.inner.checkpoint_image(progress)
    }

    fn eval(&mut self, progress: &Progress) -> std::result::Result<Metrics, T::Error> {
        self.inner.eval(progress)
    }

    fn intact_after_failed_step(&self) -> bool {
        self.inner.intact_after_failed_step()
    }
}

/// Refuses a resume whose config differs from the run's saved config.json outside `spec.resumable`.
fn check_resumable(run: &RunDir, spec: &LaunchSpec) -> Result<()> {
    let Some(saved) = run.read_config_json()? else {
        return Ok(());
    };
    let mut saved = saved;
    let mut now = spec.resolved.clone();
    for key in &spec.resumable {
        remove_dotted(&mut saved, key);
        remove_dotted(&mut now, key);
    }
    match first_difference(&saved, &now, "") {
        None => Ok(()),
        Some(key) => {
            let shown = |v: &serde_json::Value| match dotted(v, &key) {
                Some(value) => value.to_string(),
                None => "(unset)".into(),
            };
            Err(Error::config(
                &key,
                format!(
                    "was {} when the run in {} started (its config.json), now {}; resume with \
                     the config it was started with",
                    shown(&saved),
                    run.path().display(),
                    shown(&now)
                ),
            ))
        }
    }
}

/// The value at a dotted key of the resolved config (`<config>`: the whole of it).
fn dotted<'a>(value: &'a serde_json::Value, key: &str) -> Option<&'a serde_json::Value> {
    if key == "<config>" {
        return Some(value);
    }
    key.split('.').try_fold(value, |here, part| here.get(part))
}

fn remove_dotted(value: &mut serde_json::Value, dotted: &str) {
    let (parents, last) = match dotted.rsplit_once('.') {
        Some((p, l)) => (Some(p), l),
        None => (None, dotted),
    };
    let mut here = value;
    for part in parents.into_iter().flat_map(|p| p.split('.')) {
        match here.get_mut(part) {
            Some(next) => here = next,
            None => return,
        }
    }
    if let Some(map) = here.as_object_mut() {
        map.remove(last);
    }
}

/// The dotted key of the first difference between two JSON values, `None` if they are equal.
fn first_difference(a: &serde_json::Value, b: &serde_json::Value, at: &str) -> Option<String> {
    match (a.as_object(), b.as_object()) {
        (Some(x), Some(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter().find_map(|k| {
                let key = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => first_difference(p, q, &key),
                    _ => Some(key),
                }
            })
        }
        _ if a == b => None,
        _ => Some(if at.is_empty() {
            "<config>".into()
        } else {
            at.into()
        }),
    }
}

/// This process's command line with `--out DIR --resume` in place of any `--out`/`--resume` it had:
/// what continues the run.
pub fn resume_command(run_dir: &Path) -> String {
    let mut args = std::env::args();
    let mut words: Vec<String> = args.next().into_iter().collect();
    let mut rest = args.peekable();
    while let Some(arg) = rest.next() {
        if arg == "--resume" || arg.starts_with("--out=") {
            continue;
        }
        if arg == "--out" {
            rest.next();
            continue;
        }
        words.push(arg);
    }
    words.push("--out".into());
    words.push(run_dir.display().to_string());
    words.push("--resume".into());
    words
        .iter()
        .map(|w| shell_quote(w))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn differences_are_named_by_dotted_key() {
        let a = json!({"train": {"steps": 4, "lr": 1.0}, "name": "x"});
        let b = json!({"train": {"steps": 8, "lr": 1.0}, "name": "x"});
        assert_eq!(first_difference(&a, &b, ""), Some("train.steps".into()));
        let (mut a2, mut b2) = (a.clone(), b.clone());
        remove_dotted(&mut a2, "train.steps");
        remove_dotted(&mut b2, "train.steps");
        assert_eq!(first_difference(&a2, &b2, ""), None);
        let c = json!({"train": {"steps": 4, "lr": 1.0}, "name": "x", "seed": 1});
        assert_eq!(first_difference(&a, &c, ""), Some("seed".into()));
        assert_eq!(dotted(&a, "train.steps"), Some(&json!(4)));
        assert_eq!(dotted(&a, "seed"), None);
    }
}
