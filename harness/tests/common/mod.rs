//! Synthetic runs for the tests: a fake trainer whose step sleeps nothing and reports made-up metrics.

#![allow(dead_code)]

use harness::{Metrics, Progress, RunDir, StepContext, StepOutput, Trainer};
use std::path::Path;

/// A fresh run folder `name` in a temporary directory, which lives as long as the first value.
pub fn temp_run(name: &str) -> (tempfile::TempDir, RunDir) {
    let tmp = tempfile::tempdir().unwrap();
    let run = RunDir::create(tmp.path(), name).unwrap();
    (tmp, run)
}

/// A trainer with a deterministic loss curve; its whole state is `x` and the step count.
pub struct FakeTrainer {
    pub x: f64,
    pub steps_taken: u64,
    pub select_ms: f64,
    pub fail_at: Option<u64>,
    /// The injected failure leaves the state of the last step intact (a data error).
    pub fail_intact: bool,
}

impl FakeTrainer {
    pub fn new(select_ms: f64) -> FakeTrainer {
        FakeTrainer {
            x: 1.0,
            steps_taken: 0,
            select_ms,
            fail_at: None,
            fail_intact: false,
        }
    }

    /// Restores from a checkpoint folder written by `save_checkpoint`.
    pub fn load(dir: &Path, select_ms: f64) -> FakeTrainer {
        let text = std::fs::read_to_string(dir.join("state.json")).expect("state.json");
        let v: serde_json::Value = serde_json::from_str(&text).expect("json");
        FakeTrainer {
            x: v["x"].as_f64().expect("x"),
            steps_taken: v["steps"].as_u64().expect("steps"),
            select_ms,
            fail_at: None,
            fail_intact: false,
        }
    }
}

impl Trainer for FakeTrainer {
    type Error = harness::Error;

    fn step(&mut self, ctx: StepContext) -> Result<StepOutput, harness::Error> {
        assert_eq!(
            ctx.step, self.steps_taken,
            "the loop counts steps like the trainer"
        );
        if self.fail_at == Some(ctx.step) {
            return Err(harness::Error::Report(format!(
                "injected failure at {}",
                ctx.step
            )));
        }
        self.x = 0.9 * self.x + 0.01;
        self.steps_taken += 1;
        let mut metrics = Metrics::new();
        metrics.insert("loss".into(), self.x);
        metrics.insert("select_ms".into(), self.select_ms);
        Ok(StepOutput {
            tokens: 100,
            metrics,
        })
    }

    fn save_checkpoint(&mut self, dir: &Path, _progress: &Progress) -> Result<(), harness::Error> {
        let state = serde_json::json!({ "x": self.x, "steps": self.steps_taken });
        std::fs::write(dir.join("state.json"), state.to_string()).expect("write state");
        Ok(())
    }

    fn intact_after_failed_step(&self) -> bool {
        self.fail_intact
    }

    fn eval(&mut self, _progress: &Progress) -> Result<Metrics, harness::Error> {
        let mut m = Metrics::new();
        m.insert("fvu".into(), self.x / 2.0);
        Ok(m)
    }
}
