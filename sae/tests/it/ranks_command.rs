//! `train-sae` as several ranks, over the thread double of the collectives: the ranks share one run
//! directory (rank 0 writes it), each trains on its rows of the global batches, and the SAE they
//! export is the one a single process trains on the same batches; a run of 2 ranks resumes on 3 and
//! ends where one process's resumed run ends.
use crate::common;
use collective::{Collective, ThreadCollective};
use common::{max_abs_diff, synthetic_config, weights};
use harness::RankGroup;
use std::path::Path;
use std::sync::Arc;

fn config(steps: u64) -> String {
    synthetic_config("batchtopk", "", 1).replace("steps = 12", &format!("steps = {steps}"))
}

fn distributed(text: &str) -> String {
    format!("{text}\n[distributed]\nmode = \"data\"\n")
}

/// Runs `text` as `world` ranks into `dir/run`; every rank's summary.
fn run_ranks(dir: &Path, text: &str, world: usize, resume: bool) -> Vec<sae::run::RunSummary> {
    let cfg = dir.join("cfg.toml");
    std::fs::write(&cfg, text).unwrap();
    ThreadCollective::run(world, |member| {
        let rank = member.rank();
        sae::run::train_sae(&sae::run::RunOptions {
            config: cfg.clone(),
            out: Some(dir.join("run")),
            resume,
            group: Some(RankGroup::new(Arc::new(member))),
            ..Default::default()
        })
        .unwrap_or_else(|e| panic!("rank {rank}: {e}"))
    })
}

fn assert_close_weights(a: &Path, b: &Path, what: &str) {
    let (wa, wb) = (weights(a), weights(b));
    for name in ["W_enc", "b_enc", "W_dec", "b_dec"] {
        let diff = max_abs_diff(&wa[name], &wb[name]);
        assert!(diff < 1e-4, "{what}: {name} differs by {diff}");
    }
}

#[test]
fn ranks_train_the_sae_one_process_trains() {
    let one = tempfile::tempdir().unwrap();
    common::run(one.path(), &config(12), false);
    for world in [2, 3] {
        let many = tempfile::tempdir().unwrap();
        let summaries = run_ranks(many.path(), &distributed(&config(12)), world, false);
        assert!(summaries.iter().all(|s| s.step == 12 && !s.stopped));
        assert!(summaries[0].final_eval.is_some());
        assert!(summaries[1..].iter().all(|s| s.final_eval.is_none()));
        let run = many.path().join("run");
        assert!(run.join("sae").is_dir() && run.join("report.html").is_file());
        assert_close_weights(one.path(), many.path(), &format!("{world} ranks"));
    }
}

#[test]
fn a_run_on_two_ranks_resumes_on_three() {
    // The reference: one process that trains 6 steps and resumes to 12 (the learning-rate schedule
    // follows train.steps, so a resumed run is compared with a resumed run).
    let one = tempfile::tempdir().unwrap();
    common::run(one.path(), &config(6), false);
    common::run(one.path(), &config(12), true);
    let split = tempfile::tempdir().unwrap();
    run_ranks(split.path(), &distributed(&config(6)), 2, false);
    let resumed = run_ranks(split.path(), &distributed(&config(12)), 3, true);
    assert!(resumed.iter().all(|s| s.step == 12));
    assert_close_weights(one.path(), split.path(), "resumed on another world size");
}
