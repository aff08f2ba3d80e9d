//! A failed checkpoint write leaves nothing half-written behind.
use crate::common;

use common::FakeTrainer;
use harness::train_loop::{resume_point, run};
use harness::{
    LogConfig, LoopConfig, Metrics, MetricsSink, Progress, SinkOptions, StepContext, StepOutput,
    Trainer,
};
use runtime::signal::StopSignal;
use std::path::Path;

/// A trainer whose checkpoint write fails (as on a full disk) after writing part of its state.
struct FailingSave {
    inner: FakeTrainer,
    fail: bool,
}

impl Trainer for FailingSave {
    type Error = harness::Error;
    fn step(&mut self, ctx: StepContext) -> Result<StepOutput, harness::Error> {
        self.inner.step(ctx)
    }
    fn save_checkpoint(&mut self, dir: &Path, progress: &Progress) -> Result<(), harness::Error> {
        self.inner.save_checkpoint(dir, progress)?;
        if self.fail {
            std::fs::write(dir.join("weights.partial"), vec![0u8; 4096]).unwrap();
            return Err(harness::Error::RunDir {
                path: dir.join("weights"),
                message: "writing: No space left on device (injected)".into(),
            });
        }
        Ok(())
    }
    fn eval(&mut self, p: &Progress) -> Result<Metrics, harness::Error> {
        self.inner.eval(p)
    }
}

fn loop_config(total: u64) -> LoopConfig {
    let mut cfg = LoopConfig::new(
        total,
        &LogConfig {
            every: 2,
            progress: false,
            ..LogConfig::default()
        },
    );
    cfg.checkpoint_every = 4;
    cfg
}

#[test]
fn a_failed_checkpoint_leaves_no_temp_and_latest_on_a_complete_one() {
    let (_tmp, run_dir) = common::temp_run("t");
    // A partial folder from an earlier, killed process.
    let stale = run_dir.checkpoints_dir().join(".step-00000002.1.tmp");
    std::fs::create_dir_all(&stale).unwrap();
    let sink = MetricsSink::create(&run_dir, SinkOptions::default()).unwrap();
    let mut ok = FailingSave {
        inner: FakeTrainer::new(0.1),
        fail: false,
    };
    let stop = StopSignal::new();
    run(
        &mut ok,
        &run_dir,
        &sink,
        &loop_config(4),
        Progress::default(),
        &stop,
    )
    .unwrap();
    assert!(!stale.exists(), "a stale partial checkpoint is removed");
    let first = resume_point(&run_dir).unwrap();
    assert_eq!(first.progress.step, 4);

    // From the checkpoint at step 4 to step 8, whose checkpoint write fails when `fail`.
    let resume_to_8 = |fail: bool| {
        let mut trainer = FailingSave {
            inner: FakeTrainer::load(&first.dir, 0.1),
            fail,
        };
        run(
            &mut trainer,
            &run_dir,
            &sink,
            &loop_config(8),
            first.progress,
            &stop,
        )
    };
    let err = resume_to_8(true).unwrap_err().to_string();
    assert!(err.contains("weights") && err.contains("No space"), "{err}");
    let leftovers: Vec<String> = std::fs::read_dir(run_dir.checkpoints_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporaries left: {leftovers:?}");
    assert_eq!(
        resume_point(&run_dir).unwrap().progress.step,
        4,
        "latest is complete"
    );

    // After "freeing space" the resume goes through.
    let done = resume_to_8(false).unwrap();
    assert_eq!(done.progress.step, 8);
    assert_eq!(resume_point(&run_dir).unwrap().progress.step, 8);
    sink.finish().unwrap();
}
