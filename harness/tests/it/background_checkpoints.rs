//! Checkpoints written on a thread of their own: the loop goes on while one is written, waits for it
//! where it must (the next checkpoint, a stop, the end), and reports a failed write by its folder.
use crate::common;

use common::FakeTrainer;
use harness::train_loop::{resume_point, run};
use harness::{
    CheckpointImage, ImageError, LogConfig, LoopConfig, LoopSummary, MetricsSink, Outcome,
    Progress, RunDir, SinkOptions, StepContext, StepOutput, Trainer,
};
use runtime::signal::StopSignal;
use std::path::Path;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a write waits for the go-ahead of a later step before it calls the loop blocked.
const PATIENCE: Duration = Duration::from_secs(20);

/// A trainer whose checkpoint images finish writing only once a later step (or the final evaluation)
/// has run: were the loop to wait for a write before going on, the write would time out and fail.
struct ImageTrainer {
    inner: FakeTrainer,
    go: Sender<()>,
    gate: Arc<Mutex<Receiver<()>>>,
    /// A write is waiting for the go-ahead.
    waiting: bool,
    /// The write of this step's checkpoint fails, as on a full disk.
    fail_write_at: Option<u64>,
    /// Ask for a stop during this step.
    stop_at: Option<(u64, StopSignal)>,
    /// Checkpoints after this step are written without waiting for a go-ahead.
    gated_until: u64,
}

impl ImageTrainer {
    fn new() -> ImageTrainer {
        let (go, gate) = channel();
        ImageTrainer {
            inner: FakeTrainer::new(0.1),
            go,
            gate: Arc::new(Mutex::new(gate)),
            waiting: false,
            fail_write_at: None,
            stop_at: None,
            gated_until: u64::MAX,
        }
    }

    fn release(&mut self) {
        if std::mem::take(&mut self.waiting) {
            let _ = self.go.send(());
        }
    }
}

impl Trainer for ImageTrainer {
    type Error = harness::Error;

    fn step(&mut self, ctx: StepContext) -> Result<StepOutput, harness::Error> {
        self.release();
        if let Some((at, stop)) = &self.stop_at {
            if ctx.step == *at {
                stop.request();
            }
        }
        self.inner.step(ctx)
    }

    fn save_checkpoint(&mut self, dir: &Path, p: &Progress) -> Result<(), harness::Error> {
        self.inner.save_checkpoint(dir, p)
    }

    fn checkpoint_image(
        &mut self,
        p: &Progress,
    ) -> Result<Option<CheckpointImage>, harness::Error> {
        let state = serde_json::json!({ "x": self.inner.x, "steps": self.inner.steps_taken });
        let gate = self.gate.clone();
        let fail = self.fail_write_at == Some(p.step);
        let gated = p.step <= self.gated_until;
        self.waiting = gated;
        Ok(Some(Box::new(
            move |dir: &Path| -> Result<(), ImageError> {
                if gated {
                    let gate = gate.lock().map_err(|_| "gate poisoned")?;
                    gate.recv_timeout(PATIENCE)
                        .map_err(|_| "no step ran while this checkpoint was written")?;
                }
                if fail {
                    return Err("no space left on device".into());
                }
                std::fs::write(dir.join("state.json"), state.to_string())?;
                Ok(())
            },
        )))
    }

    fn eval(&mut self, p: &Progress) -> Result<harness::Metrics, harness::Error> {
        self.release();
        self.inner.eval(p)
    }
}

fn config(total: u64, checkpoint_every: u64) -> LoopConfig {
    let log = LogConfig {
        every: 5,
        progress: false,
        ..LogConfig::default()
    };
    let mut cfg = LoopConfig::new(total, &log);
    cfg.checkpoint_every = checkpoint_every;
    cfg.keep_checkpoints = 0;
    cfg
}

/// Runs `trainer` for `total` steps with a checkpoint every 10 in a fresh run folder `name`.
fn run_loop(
    name: &str,
    trainer: &mut ImageTrainer,
    total: u64,
    stop: &StopSignal,
) -> (
    tempfile::TempDir,
    RunDir,
    Result<LoopSummary, harness::Error>,
) {
    let (tmp, run_dir) = common::temp_run(name);
    let sink = MetricsSink::create(&run_dir, SinkOptions::default()).unwrap();
    let summary = run(
        trainer,
        &run_dir,
        &sink,
        &config(total, 10),
        Progress::default(),
        stop,
    );
    sink.finish().unwrap();
    (tmp, run_dir, summary)
}

fn steps_on_disk(run_dir: &RunDir) -> Vec<u64> {
    let ckpts = run_dir.checkpoints().unwrap();
    ckpts.iter().map(|c| c.progress.step).collect()
}

fn leftovers(run_dir: &RunDir) -> Vec<String> {
    std::fs::read_dir(run_dir.checkpoints_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect()
}

#[test]
fn checkpoints_are_written_while_the_next_steps_and_the_final_eval_run() {
    let mut trainer = ImageTrainer::new();
    let (_tmp, run_dir, summary) = run_loop("bg", &mut trainer, 25, &StopSignal::new());
    let summary = summary.unwrap();
    assert_eq!(summary.outcome, Outcome::Completed);
    assert!(summary.final_eval.is_some());
    assert_eq!(steps_on_disk(&run_dir), vec![10, 20, 25]);
    let latest = resume_point(&run_dir).unwrap();
    assert_eq!(latest.progress.step, 25);
    assert_eq!(
        summary.last_checkpoint.as_deref(),
        Some(latest.dir.as_path())
    );

    // The checkpoint holds the state of its own step, not a later one.
    let mut straight = FakeTrainer::new(0.1);
    for step in 0..10 {
        straight.step(StepContext { step, log: false }).unwrap();
    }
    let at_10 = FakeTrainer::load(&run_dir.checkpoint_dir(10), 0.1);
    assert_eq!((at_10.x, at_10.steps_taken), (straight.x, 10));
    let at_25 = FakeTrainer::load(&latest.dir, 0.1);
    assert_eq!(at_25.x, trainer.inner.x);
}

#[test]
fn a_failed_write_stops_the_run_naming_the_checkpoint_and_leaves_no_partial_folder() {
    let mut trainer = ImageTrainer::new();
    trainer.fail_write_at = Some(10);
    let (_tmp, run_dir, summary) = run_loop("bg-fail", &mut trainer, 30, &StopSignal::new());
    let err = summary.unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("writing checkpoint") && text.contains("no space left on device"),
        "{text}"
    );
    assert!(
        text.contains(&run_dir.checkpoint_dir(10).display().to_string()),
        "{text}"
    );
    assert_eq!(
        trainer.inner.steps_taken, 20,
        "found at the next checkpoint"
    );
    assert!(steps_on_disk(&run_dir).is_empty());
    assert!(leftovers(&run_dir).is_empty(), "{:?}", leftovers(&run_dir));
}

#[test]
fn a_stop_waits_for_the_write_in_flight_then_checkpoints_its_step() {
    let stop = StopSignal::new();
    let mut trainer = ImageTrainer::new();
    trainer.stop_at = Some((11, stop.clone()));
    trainer.gated_until = 10;
    let (_tmp, run_dir, summary) = run_loop("bg-stop", &mut trainer, 30, &stop);
    let summary = summary.unwrap();
    assert_eq!(summary.outcome, Outcome::Stopped);
    assert_eq!(summary.progress.step, 12);
    assert_eq!(steps_on_disk(&run_dir), vec![10, 12]);
    assert_eq!(resume_point(&run_dir).unwrap().progress.step, 12);
    assert!(leftovers(&run_dir).is_empty());
}
