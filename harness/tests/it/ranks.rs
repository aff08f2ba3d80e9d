//! A run of several ranks through the launcher, over the thread double of the collectives: rank 0
//! owns the run directory and every rank writes its part of each checkpoint into the same folder; a
//! stop on any rank stops all after the same step; a part that fails on one rank fails every rank and
//! leaves no checkpoint behind; the other ranks learn why rank 0 could not open the directory.
use crate::common::FakeTrainer;
use crate::launch::spec;
use collective::{Collective, ThreadCollective};
use harness::{
    Finished, Launch, LogConfig, LoopConfig, Metrics, Outcome, Progress, RankGroup, StepContext,
    StepOutput, Trainer,
};
use runtime::signal::StopSignal;
use std::path::Path;
use std::sync::Arc;

/// The fake trainer as one rank: rank 0 writes the state, every rank its own part.
struct RankTrainer {
    inner: FakeTrainer,
    rank: usize,
    /// Requests this rank's stop once it has taken this many steps.
    stop_after: Option<(u64, StopSignal)>,
    /// The part of the checkpoint of this step fails on this rank.
    fail_part_at: Option<u64>,
}

impl Trainer for RankTrainer {
    type Error = harness::Error;

    fn step(&mut self, ctx: StepContext) -> harness::Result<StepOutput> {
        let out = self.inner.step(ctx)?;
        if let Some((after, stop)) = &self.stop_after {
            if self.inner.steps_taken == *after {
                stop.request();
            }
        }
        Ok(out)
    }

    fn save_checkpoint(&mut self, dir: &Path, progress: &Progress) -> harness::Result<()> {
        if self.fail_part_at == Some(progress.step) {
            return Err(harness::Error::Report("no space left for the part".into()));
        }
        if self.rank == 0 {
            self.inner.save_checkpoint(dir, progress)?;
        }
        let part = serde_json::json!({ "rank": self.rank, "steps": self.inner.steps_taken });
        std::fs::write(
            dir.join(format!("part.rank{}.json", self.rank)),
            part.to_string(),
        )
        .expect("write part");
        Ok(())
    }

    fn eval(&mut self, progress: &Progress) -> harness::Result<Metrics> {
        assert_eq!(self.rank, 0, "only rank 0 evaluates");
        self.inner.eval(progress)
    }
}

fn rank_trainer(rank: usize) -> RankTrainer {
    RankTrainer {
        inner: FakeTrainer::new(0.1),
        rank,
        stop_after: None,
        fail_part_at: None,
    }
}

fn loop_cfg(steps: u64) -> LoopConfig {
    let mut cfg = LoopConfig::new(steps, &LogConfig::default());
    cfg.progress_bar = false;
    cfg.checkpoint_every = 2;
    cfg.keep_checkpoints = 0;
    cfg
}

/// Runs `steps` on `world` ranks in `root/run`; `setup` adjusts each rank's trainer.
fn run_ranks(
    root: &Path,
    world: usize,
    steps: u64,
    resume: bool,
    setup: impl Fn(&mut RankTrainer, &StopSignal) + Sync,
) -> Vec<harness::Result<Finished>> {
    ThreadCollective::run(world, |member| {
        let rank = member.rank();
        let group = RankGroup::new(Arc::new(member));
        let launch = Launch::open_in(spec(root, 0.1, steps, resume), Some(group))?;
        let mut trainer = rank_trainer(rank);
        let stop = StopSignal::new();
        setup(&mut trainer, &stop);
        let start = match launch.resume_from() {
            Some(ckpt) => {
                trainer.inner = FakeTrainer::load(&ckpt.dir, 0.1);
                ckpt.progress
            }
            None => Progress::default(),
        };
        launch.train(
            &mut trainer,
            &loop_cfg(steps),
            start,
            Default::default(),
            &stop,
        )
    })
}

fn train_steps(run: &Path) -> Vec<u64> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["kind"] == "train")
        .map(|r| r["step"].as_u64().unwrap())
        .collect()
}

fn parts(checkpoint: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(checkpoint)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("part."))
        .collect();
    names.sort();
    names
}

#[test]
fn ranks_share_one_run_directory_and_every_checkpoint_holds_each_part() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let finished: Vec<Finished> = run_ranks(tmp.path(), 3, 6, false, |_, _| {})
        .into_iter()
        .map(|r| r.expect("every rank finishes"))
        .collect();
    for f in &finished {
        assert_eq!(f.run_dir, run);
        assert_eq!(f.summary.outcome, Outcome::Completed);
        assert_eq!(f.summary.progress.step, 6);
    }
    assert!(finished[0].summary.final_eval.is_some());
    assert!(finished[1..].iter().all(|f| f.summary.final_eval.is_none()));
    // One writer of the metrics: each step once.
    assert_eq!(train_steps(&run), (1..=6).collect::<Vec<_>>());
    for step in [2, 4, 6] {
        let dir = run.join("checkpoints").join(format!("step-{step:08}"));
        assert_eq!(
            parts(&dir),
            ["part.rank0.json", "part.rank1.json", "part.rank2.json"],
            "{}",
            dir.display()
        );
        assert!(dir.join("state.json").exists() && dir.join("progress.json").exists());
    }

    // Resumed on another world size: every rank starts from rank 0's checkpoint.
    let resumed: Vec<Finished> = run_ranks(tmp.path(), 2, 8, true, |_, _| {})
        .into_iter()
        .map(|r| r.expect("the resumed ranks finish"))
        .collect();
    assert!(resumed.iter().all(|f| f.summary.progress.step == 8));
    assert_eq!(train_steps(&run), (1..=8).collect::<Vec<_>>());
    let last = run.join("checkpoints").join("step-00000008");
    assert_eq!(parts(&last), ["part.rank0.json", "part.rank1.json"]);
}

#[test]
fn a_stop_on_one_rank_stops_every_rank_after_the_same_step() {
    let tmp = tempfile::tempdir().unwrap();
    let results = run_ranks(tmp.path(), 3, 50, false, |t, stop| {
        if t.rank == 2 {
            t.stop_after = Some((5, stop.clone()));
        }
    });
    for r in results {
        let f = r.expect("a stop is not an error");
        assert_eq!(f.summary.outcome, Outcome::Stopped);
        assert_eq!(f.summary.progress.step, 5);
    }
    let dir = tmp.path().join("run/checkpoints/step-00000005");
    assert_eq!(
        parts(&dir),
        ["part.rank0.json", "part.rank1.json", "part.rank2.json"]
    );
}

#[test]
fn a_part_that_fails_on_one_rank_fails_every_rank_and_leaves_no_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let results = run_ranks(tmp.path(), 3, 6, false, |t, _| {
        if t.rank == 1 {
            t.fail_part_at = Some(4);
        }
    });
    for r in results {
        let err = r.expect_err("every rank fails").to_string();
        assert!(
            err.contains("rank 1") && err.contains("no space left"),
            "{err}"
        );
    }
    let checkpoints = tmp.path().join("run/checkpoints");
    assert!(checkpoints.join("step-00000002").exists());
    let left: Vec<String> = std::fs::read_dir(&checkpoints)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp") || n.contains("00000004"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn the_other_ranks_learn_why_rank0_could_not_open_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(run.join("metrics.jsonl"), "").unwrap();
    let results = run_ranks(tmp.path(), 2, 4, false, |_, _| {});
    let errors: Vec<String> = results
        .into_iter()
        .map(|r| r.expect_err("refused").to_string())
        .collect();
    assert!(errors[0].contains("already holds a run"), "{}", errors[0]);
    assert!(
        errors[1].contains("rank 0 could not open") && errors[1].contains("already holds a run"),
        "{}",
        errors[1]
    );
}
