use crate::common;

use common::FakeTrainer;
use harness::metrics::read_records;
use harness::train_loop::{resume_point, run};
use harness::{
    LogConfig, LoopConfig, LoopSummary, MetricsSink, Outcome, Progress, RecordKind, RunDir,
    SinkOptions, StepContext, StepOutput, Trainer,
};
use runtime::signal::StopSignal;

fn config(total: u64, log_every: u64, checkpoint_every: u64) -> LoopConfig {
    let mut cfg = LoopConfig::new(
        total,
        &LogConfig {
            every: log_every,
            progress: false,
            ..LogConfig::default()
        },
    );
    cfg.checkpoint_every = checkpoint_every;
    cfg.keep_checkpoints = 2;
    cfg
}

/// `trainer` from the first step to the end of `cfg`, never stopped.
fn run_through(
    trainer: &mut FakeTrainer,
    dir: &RunDir,
    sink: &MetricsSink,
    cfg: &LoopConfig,
) -> Result<LoopSummary, harness::Error> {
    run(
        trainer,
        dir,
        sink,
        cfg,
        Progress::default(),
        &StopSignal::new(),
    )
}

#[test]
fn a_full_run_logs_averages_checkpoints_and_evaluates() {
    let (_tmp, run_dir) = common::temp_run("t");
    let sink = MetricsSink::create(&run_dir, SinkOptions::default()).unwrap();
    let mut trainer = FakeTrainer::new(0.5);
    let summary = run_through(&mut trainer, &run_dir, &sink, &config(25, 10, 10)).unwrap();
    sink.finish().unwrap();
    assert_eq!(summary.outcome, Outcome::Completed);
    assert_eq!(summary.progress.step, 25);
    assert_eq!(summary.progress.tokens, 2500);
    assert!(summary.final_eval.unwrap().contains_key("fvu"));

    let records = read_records(&run_dir.metrics_path()).unwrap();
    let train: Vec<u64> = records
        .iter()
        .filter(|r| r.kind == RecordKind::Train)
        .map(|r| r.step)
        .collect();
    assert_eq!(train, vec![10, 20, 25], "every 10 steps and the last");
    let first = &records[0];
    for name in [
        "loss",
        "select_ms",
        "step_ms",
        "select_share",
        "tokens_per_s",
    ] {
        assert!(first.metrics.contains_key(name), "missing {name}");
    }
    assert_eq!(first.metrics["select_ms"], 0.5, "mean over the window");
    let last = records.last().unwrap();
    assert_eq!((last.kind, last.step), (RecordKind::Eval, 25));

    // Checkpoints at 10, 20 and the end; only the newest two kept.
    let kept: Vec<u64> = run_dir
        .checkpoints()
        .unwrap()
        .iter()
        .map(|c| c.progress.step)
        .collect();
    assert_eq!(kept, vec![20, 25]);
    assert_eq!(resume_point(&run_dir).unwrap().progress.step, 25);
}

/// A trainer that asks for a stop (as Ctrl-C would) during a given step.
struct StopsAt {
    inner: FakeTrainer,
    at: u64,
    stop: StopSignal,
}

impl Trainer for StopsAt {
    type Error = harness::Error;
    fn step(&mut self, ctx: StepContext) -> Result<StepOutput, harness::Error> {
        if ctx.step == self.at {
            self.stop.request();
        }
        self.inner.step(ctx)
    }
    fn save_checkpoint(
        &mut self,
        dir: &std::path::Path,
        p: &Progress,
    ) -> Result<(), harness::Error> {
        self.inner.save_checkpoint(dir, p)
    }
}

#[test]
fn a_stopped_and_resumed_run_matches_an_uninterrupted_one() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(30, 1, 10);

    let straight_dir = RunDir::create(tmp.path(), "straight").unwrap();
    let sink = MetricsSink::create(&straight_dir, SinkOptions::default()).unwrap();
    let mut straight = FakeTrainer::new(0.1);
    run_through(&mut straight, &straight_dir, &sink, &cfg).unwrap();
    sink.finish().unwrap();

    let dir = RunDir::create(tmp.path(), "stopped").unwrap();
    let sink = MetricsSink::create(&dir, SinkOptions::default()).unwrap();
    let stop = StopSignal::new();
    let mut first = StopsAt {
        inner: FakeTrainer::new(0.1),
        at: 16,
        stop: stop.clone(),
    };
    let summary = run(&mut first, &dir, &sink, &cfg, Progress::default(), &stop).unwrap();
    sink.finish().unwrap();
    assert_eq!(summary.outcome, Outcome::Stopped);
    assert_eq!(summary.progress.step, 17, "the step in flight finishes");
    assert!(summary.final_eval.is_none());

    // Simulate records logged after the checkpoint by a run that then crashed.
    let ckpt = resume_point(&dir).unwrap();
    assert_eq!(ckpt.progress.step, 17);
    let mut resumed = FakeTrainer::load(&ckpt.dir, 0.1);
    let sink = MetricsSink::resume(&dir, ckpt.progress.step, SinkOptions::default()).unwrap();
    let summary = run(
        &mut resumed,
        &dir,
        &sink,
        &cfg,
        ckpt.progress,
        &StopSignal::new(),
    )
    .unwrap();
    sink.finish().unwrap();
    assert_eq!(summary.outcome, Outcome::Completed);
    assert_eq!(resumed.x, straight.x, "same final state");
    assert_eq!(summary.progress.tokens, 3000);

    let steps = |d: &RunDir| -> Vec<(u64, RecordKind, Option<f64>)> {
        read_records(&d.metrics_path())
            .unwrap()
            .iter()
            .map(|r| (r.step, r.kind, r.metrics.get("loss").copied()))
            .collect()
    };
    assert_eq!(
        steps(&dir),
        steps(&straight_dir),
        "one consistent metrics file"
    );
}

#[test]
fn a_failing_step_returns_its_error() {
    let (_tmp, dir) = common::temp_run("fail");
    let sink = MetricsSink::create(&dir, SinkOptions::default()).unwrap();
    let mut trainer = FakeTrainer::new(0.1);
    trainer.fail_at = Some(3);
    let err = run_through(&mut trainer, &dir, &sink, &config(10, 1, 0)).unwrap_err();
    assert!(err.to_string().contains("injected failure at 3"));
    drop(sink);
    assert_eq!(
        read_records(&dir.metrics_path()).unwrap().len(),
        3,
        "steps before the failure are kept"
    );
}
