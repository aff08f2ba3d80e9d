//! Impossible sizes and settings are config errors that name their key and the valid range, found
//! before anything large is allocated and before a run directory exists.
use crate::common;
use common::synthetic_config;
use sae::run::{train_sae, RunOptions};
use std::path::{Path, PathBuf};

/// Runs `train-sae` on `text` with `--out <tmp>/run`; returns the error text (or None) and the run dir.
fn run(text: &str, tmp: &Path) -> (Result<sae::run::RunSummary, String>, PathBuf) {
    let cfg = tmp.join("cfg.toml");
    std::fs::write(&cfg, text).unwrap();
    let out = tmp.join("run");
    let r = train_sae(&RunOptions {
        config: cfg,
        out: Some(out.clone()),
        resume: false,
        ..Default::default()
    })
    .map_err(|e| e.to_string());
    (r, out)
}

fn expect_err(text: &str, needles: &[&str]) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let (r, out) = run(text, tmp.path());
    let err = r.err().expect("the run must be refused");
    for n in needles {
        assert!(err.contains(n), "`{n}` missing from: {err}");
    }
    assert!(!out.exists(), "a refused start left {}", out.display());
    err
}

#[test]
fn an_sae_too_large_for_memory_is_refused_with_the_numbers() {
    let text =
        synthetic_config("batchtopk", "", 1).replace("latents = 64", "latents = 17179869184");
    let err = expect_err(&text, &["sae.latents", "available", "TiB"]);
    assert!(err.contains("SAE weights"), "{err}");
}

#[test]
fn the_estimate_counts_weights_adam_batch_and_buffer() {
    let text = synthetic_config("batchtopk", "", 1);
    let cfg = sae::Config::from_toml(&text).unwrap();
    let parts = sae::memory::estimate(&cfg, 16, false);
    let weights = parts
        .iter()
        .find(|p| p.what.starts_with("SAE weights"))
        .unwrap();
    // W_enc, W_dec (64 x 16 each), b_enc, b_dec; times weights, gradients, two Adam moments; f32.
    assert_eq!(weights.bytes, (2 * 64 * 16 + 64 + 16) * 4 * 4);
    // A checkpoint's copy (weights and both moments) while it is written; on CUDA on both sides.
    let copy = |cuda: bool| -> Vec<(bool, u128)> {
        sae::memory::estimate(&cfg, 16, cuda)
            .iter()
            .filter(|p| p.what.starts_with("a checkpoint being written"))
            .map(|p| (p.on_device, p.bytes))
            .collect()
    };
    let bytes = (2 * 64 * 16 + 64 + 16) * 4 * 3;
    assert_eq!(copy(false), vec![(false, bytes)]);
    assert_eq!(copy(true), vec![(true, bytes), (false, bytes)]);
    let held = parts
        .iter()
        .find(|p| p.key == "data.held_out_tokens")
        .unwrap();
    assert_eq!(held.bytes, 256 * 16 * 4);
}

#[test]
fn held_out_sizes_are_checked() {
    let base = synthetic_config("batchtopk", "", 1);
    for n in [1, 63] {
        let text = base.replace("held_out_tokens = 256", &format!("held_out_tokens = {n}"));
        let err = sae::Config::from_toml(&text).unwrap_err().to_string();
        assert!(
            err.contains("data.held_out_tokens") && err.contains("≥ 64") && err.contains("0 (skip"),
            "{err}"
        );
    }
    // 0 skips the held-out evaluation and says so in the metrics.
    let tmp = tempfile::tempdir().unwrap();
    let (r, out) = run(
        &base.replace("held_out_tokens = 256", "held_out_tokens = 0"),
        tmp.path(),
    );
    let summary = r.unwrap();
    let eval = summary.final_eval.unwrap();
    assert_eq!(eval.get("heldout_tokens"), Some(&0.0));
    assert!(!eval.contains_key("heldout_fvu"));
    let metrics = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    assert!(metrics.contains("\"heldout_tokens\""), "{metrics}");
    // The summary and the report say so, and how to get one.
    let hint = summary.no_held_out.unwrap_or_default();
    assert!(
        hint.contains("no held-out evaluation") && hint.contains("data.held_out_tokens"),
        "{hint}"
    );
    let report = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(report.contains("no held-out evaluation (heldout_tokens 0)"));
}

fn model_config(extra: &str, layers: &str, context: usize) -> String {
    format!(
        r#"
name = "test"
{extra}
[data]
source = "model"
model = "random:tiny"
layers = {layers}
context = {context}
held_out_tokens = 128
buffer_tokens = 256
[sae]
latents = 64
k = 4
[train]
batch_size = 64
steps = 2
[log]
progress = false
"#
    )
}

#[test]
fn model_limits_name_their_keys() {
    let n_pos = gpt2::Gpt2Config::tiny().n_positions;
    let err = expect_err(
        &model_config("", "[2]", n_pos + 1),
        &["data.context", &format!("2..={n_pos}")],
    );
    assert!(err.contains(&format!("{}", n_pos + 1)), "{err}");
    let err = expect_err(
        &model_config("", "[6]", 16),
        &["data.layers", "layer 6", "4 layers", "0..=3"],
    );
    assert!(!err.contains("blocks.6"), "{err}");
}

// A CUDA build accepts the key, so the test exists only without the feature.
#[cfg(not(feature = "cuda"))]
#[test]
fn cuda_on_a_cpu_build_names_the_key() {
    let text =
        synthetic_config("batchtopk", "", 1).replace("seed = 7", "seed = 7\ndevice = \"cuda\"");
    expect_err(&text, &["device", "--features cuda", "\"cpu\""]);
}

#[test]
fn a_missing_config_file_is_reported_once() {
    let err = train_sae(&RunOptions {
        config: "no/such/config.toml".into(),
        out: None,
        resume: false,
        ..Default::default()
    })
    .err()
    .expect("a missing config is an error");
    let chain = format!("{:?}", anyhow::Error::from(err));
    assert!(chain.contains("no/such/config.toml"), "{chain}");
    assert_eq!(chain.matches("No such file").count(), 1, "{chain}");
}
