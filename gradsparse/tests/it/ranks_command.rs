//! `finetune` as several ranks, over the thread double of the collectives: the ranks share one run
//! directory (rank 0 writes it, each rank adds its optimizer file to every checkpoint), stop and
//! resume together, and a resume on another world size is refused naming the cause.
use collective::ThreadCollective;
use gradsparse::run::{finetune, RunOptions, RunResult};
use harness::RankGroup;
use std::path::Path;
use std::sync::Arc;

const TINY: &str = r#"
name = "dp"
seed = 5
[model]
name = "tiny"
[data]
synthetic = true
context = 16
[train]
batch_size = 2
steps = STEPS
lr = 3e-3
checkpoint_every = 2
[sparsify]
density = 0.01
[distributed]
mode = "data"
exchange = "sparse"
[log]
progress = false
"#;

fn run_ranks(
    root: &Path,
    steps: u64,
    world: usize,
    resume: bool,
) -> Vec<Result<RunResult, String>> {
    let cfg = root.join(format!("steps{steps}.toml"));
    std::fs::write(&cfg, TINY.replace("STEPS", &steps.to_string())).unwrap();
    ThreadCollective::run(world, |member| {
        let opts = RunOptions {
            out: Some(root.join("run")),
            resume,
            group: Some(RankGroup::new(Arc::new(member))),
            ..Default::default()
        };
        finetune(&cfg, &opts).map_err(|e| e.to_string())
    })
}

fn checkpoint_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn ranks_share_the_run_directory_and_resume_together() {
    let root = tempfile::tempdir().unwrap();
    let first: Vec<RunResult> = run_ranks(root.path(), 2, 2, false)
        .into_iter()
        .map(|r| r.expect("every rank finishes"))
        .collect();
    assert!(first.iter().all(|r| r.summary.progress.step == 2));
    let run = root.path().join("run");
    let ckpt = run.join("checkpoints/step-00000002");
    let files = checkpoint_files(&ckpt);
    for part in [
        "optimizer.rank0.safetensors",
        "optimizer.rank1.safetensors",
        "model.safetensors",
    ] {
        assert!(files.iter().any(|f| f == part), "{part} missing: {files:?}");
    }
    assert!(run.join("report.html").is_file());

    let resumed: Vec<RunResult> = run_ranks(root.path(), 4, 2, true)
        .into_iter()
        .map(|r| r.expect("the resumed ranks finish"))
        .collect();
    assert!(resumed.iter().all(|r| r.summary.progress.step == 4));
    let records = harness::metrics::read_records(&run.join("metrics.jsonl")).unwrap();
    let train: Vec<u64> = records
        .iter()
        .filter(|r| r.kind == harness::RecordKind::Train)
        .map(|r| r.step)
        .collect();
    assert_eq!(train, vec![1, 2, 3, 4], "one writer of the metrics");

    // Each rank's residual is its own: another world size is refused on every rank.
    for r in run_ranks(root.path(), 6, 3, true) {
        let err = r.expect_err("refused");
        assert!(err.contains("rank"), "{err}");
    }
}
