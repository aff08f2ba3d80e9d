//! Training from shards through the prefetching reader: the same seed gives the same weights with the
//! producer thread on or off, and a run resumed from its checkpoint matches an uninterrupted one.
use crate::common;
use activations::shards::{extract, ExtractConfig, ExtractOptions};
use common::{assert_same_weights, run};
use std::path::Path;

fn shards(root: &Path) -> std::path::PathBuf {
    let out = root.join("shards");
    let toml = format!(
        r#"
model = "random:tiny:3"
out_dir = "{}"
hook_points = ["resid_post.1"]
tokens_per_shard = 500
batch_contexts = 8
[data]
corpus = "default"
split = "train"
context = 32
max_tokens = 2400
"#,
        out.display()
    );
    let cfg = ExtractConfig::from_toml(&toml, Path::new("shards.toml")).unwrap();
    extract(&cfg, &ExtractOptions::default()).unwrap();
    out
}

fn config(dir: &Path, prefetch: usize) -> String {
    format!(
        r#"
name = "shards"
seed = 5
[data]
source = "shards"
dir = "{}"
buffer_tokens = 512
mix_shards = 2
prefetch = {prefetch}
[sae]
arch = "batchtopk"
latents = 64
k = 4
[train]
batch_size = 128
steps = 30
lr = 3e-3
warmup_steps = 2
checkpoint_every = 12
[eval]
enabled = false
[log]
every = 6
progress = false
"#,
        dir.display()
    )
}

#[test]
fn prefetch_and_resume_keep_training_bit_exact() {
    let root = tempfile::tempdir().unwrap();
    // 2400 tokens and 30 steps of 128: two epoch boundaries and several buffer refills.
    let dir = shards(root.path());
    let ahead = tempfile::tempdir().unwrap();
    run(ahead.path(), &config(&dir, 3), false);
    let inline = tempfile::tempdir().unwrap();
    run(inline.path(), &config(&dir, 0), false);
    assert_same_weights(ahead.path(), inline.path(), "prefetch on vs off");

    let resumed = tempfile::tempdir().unwrap();
    run(resumed.path(), &config(&dir, 3), false);
    // A kill after the step-24 checkpoint: drop the final checkpoint and the export.
    let ckpts = resumed.path().join("run/checkpoints");
    std::fs::remove_dir_all(ckpts.join("step-00000030")).unwrap();
    std::fs::remove_dir_all(resumed.path().join("run/sae")).unwrap();
    assert_eq!(run(resumed.path(), &config(&dir, 3), true).step, 30);
    assert_same_weights(ahead.path(), resumed.path(), "resumed vs uninterrupted");

    let metrics = std::fs::read_to_string(ahead.path().join("run/metrics.jsonl")).unwrap();
    for key in [
        "\"data_wait_ms\"",
        "\"data_wait_share\"",
        "\"run_tokens_per_s\"",
    ] {
        assert!(metrics.contains(key), "metrics.jsonl lacks {key}");
    }
}
