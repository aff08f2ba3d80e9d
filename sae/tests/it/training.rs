//! Training runs on synthetic data: the loss falls, a killed run resumed from its checkpoint reaches the
//! same weights as an uninterrupted one, checkpoints load back, and the selector cross-check passes.
use crate::common;
use candle_core::Device;
use common::{assert_same_weights, run, synthetic_config, weights};
use sae::checkpoint::read_saelens;
use std::path::PathBuf;
use tempfile::TempDir;

/// Two runs of `text`, the second as if killed after its step-6 checkpoint (its final checkpoint and
/// export removed): (the uninterrupted run, the killed one, the killed one's step-6 checkpoint).
fn uninterrupted_and_killed(text: &str) -> (TempDir, TempDir, PathBuf) {
    let a = tempfile::tempdir().unwrap();
    run(a.path(), text, false);
    let b = tempfile::tempdir().unwrap();
    run(b.path(), text, false);
    let ckpts = b.path().join("run/checkpoints");
    std::fs::remove_dir_all(ckpts.join("step-00000012")).unwrap();
    std::fs::remove_dir_all(b.path().join("run/sae")).unwrap();
    (a, b, ckpts.join("step-00000006"))
}

#[test]
fn resume_reaches_the_same_weights() {
    for (arch, extra, layers) in [
        ("batchtopk", "", 1),
        ("matryoshka", "group_sizes = [16, 48]", 1),
        ("crosscoder", "", 2),
    ] {
        // Dead latents after two silent steps, so the aux-k loss runs on both sides of the resume.
        let text =
            synthetic_config(arch, extra, layers).replace("dead_tokens = 512", "dead_tokens = 128");
        let (a, b, ckpt) = uninterrupted_and_killed(&text);
        let state = ckpt.join("training_state.safetensors");
        let stored = candle_core::safetensors::load(&state, &Device::Cpu).unwrap();
        assert_eq!(
            stored.contains_key("W_enc") && stored.contains_key("W_dec"),
            layers > 1,
            "{arch}: the weight matrices are stored once with one hook point"
        );
        let s = run(b.path(), &text, true);
        assert_eq!(s.step, 12);
        assert_same_weights(a.path(), b.path(), &format!("{arch} after resume"));
    }
}

/// `train.moments = "bf16"`: the checkpoint stores the moments in bf16 and a resumed run reaches the
/// uninterrupted run's weights.
#[test]
fn bf16_moments_are_checkpointed_and_resume_exactly() {
    let text =
        synthetic_config("batchtopk", "", 1).replace("[train]", "[train]\nmoments = \"bf16\"");
    let (a, b, ckpt) = uninterrupted_and_killed(&text);
    let state = ckpt.join("training_state.safetensors");
    let stored = candle_core::safetensors::load(&state, &Device::Cpu).unwrap();
    for name in ["adam_m.W_enc", "adam_v.W_dec", "adam_m.b_dec"] {
        assert_eq!(stored[name].dtype(), candle_core::DType::BF16, "{name}");
    }
    let s = run(b.path(), &text, true);
    assert_eq!(s.step, 12);
    assert_same_weights(a.path(), b.path(), "bf16 moments after resume");
}

#[test]
fn a_checkpoint_with_the_weights_in_its_training_state_still_resumes() {
    let text = synthetic_config("batchtopk", "", 1);
    let (a, b, dir) = uninterrupted_and_killed(&text);
    // The older layout: W_enc ([n, d_in]) and W_dec in training_state too, the SAELens file damaged.
    let (_, saelens) = read_saelens(&dir).unwrap();
    let path = dir.join("training_state.safetensors");
    let mut state = candle_core::safetensors::load(&path, &Device::Cpu).unwrap();
    state.insert(
        "W_enc".into(),
        saelens["W_enc"].t().unwrap().contiguous().unwrap(),
    );
    state.insert("W_dec".into(), saelens["W_dec"].clone());
    candle_core::safetensors::save(&state, &path).unwrap();
    let zeros: std::collections::HashMap<String, candle_core::Tensor> = saelens
        .iter()
        .map(|(k, v)| (k.clone(), v.zeros_like().unwrap()))
        .collect();
    candle_core::safetensors::save(&zeros, dir.join("sae_weights.safetensors")).unwrap();
    assert_eq!(run(b.path(), &text, true).step, 12);
    assert_same_weights(a.path(), b.path(), "resumed from the older layout");
}

#[test]
fn a_checkpoint_without_its_saelens_file_is_refused_by_name() {
    let text = synthetic_config("batchtopk", "", 1);
    let (_a, b, dir) = uninterrupted_and_killed(&text);
    std::fs::remove_file(dir.join("sae_weights.safetensors")).unwrap();
    let cfg = b.path().join("cfg.toml");
    let err = sae::run::train_sae(&sae::run::RunOptions {
        config: cfg,
        out: Some(b.path().join("run")),
        resume: true,
        ..Default::default()
    })
    .err()
    .expect("a resume without the weights fails")
    .to_string();
    assert!(
        err.contains("sae_weights.safetensors is missing") && err.contains("step-00000006"),
        "{err}"
    );
}

#[test]
fn training_reduces_loss_and_exports_saelens_layout() {
    let text = synthetic_config("batchtopk", "", 1)
        .replace("steps = 12", "steps = 60")
        .replace("dead_tokens = 512", "dead_tokens = 64")
        .replace(
            "[log]",
            "[selector]\ncompare = true\ncompare_with = \"sort\"\ncompare_every = 5\n[log]",
        );
    let dir = tempfile::tempdir().unwrap();
    let s = run(dir.path(), &text, false);
    let m = s.final_eval.unwrap();
    assert!(m["heldout_fvu"] < 0.5, "held-out FVU {}", m["heldout_fvu"]);
    assert!((m["heldout_l0"] - 4.0).abs() < 1e-9);
    let (cfg, w) = read_saelens(&sae::hub::find_sae(&dir.path().join("run/sae")).unwrap()).unwrap();
    assert_eq!(cfg["architecture"], "jumprelu");
    assert_eq!(cfg["d_in"], 16);
    assert_eq!(cfg["d_sae"], 64);
    assert_eq!(w["W_enc"].dims(), &[16, 64]);
    assert_eq!(w["W_dec"].dims(), &[64, 16]);
    assert_eq!(w["b_enc"].dims(), &[64]);
    assert_eq!(w["b_dec"].dims(), &[16]);
    assert_eq!(w["threshold"].dims(), &[64]);
    let records = std::fs::read_to_string(dir.path().join("run/metrics.jsonl")).unwrap();
    for key in [
        "\"mse\"",
        "\"fvu\"",
        "\"l0\"",
        "\"dead_fraction\"",
        "\"aux_loss\"",
        "\"threshold\"",
        "\"step_ms\"",
        "\"select_ms\"",
    ] {
        assert!(records.contains(key), "metrics.jsonl lacks {key}");
    }
    let parsed: Vec<serde_json::Value> = records
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let train_mse: Vec<f64> = parsed
        .iter()
        .filter(|v| v["kind"] == "train")
        .filter_map(|v| v["metrics"]["mse"].as_f64())
        .collect();
    // The means of the first and last three logged steps, so that one noisy step decides nothing
    // (the MSE falls about sevenfold over the 60 steps).
    assert!(train_mse.len() >= 10, "{} train records", train_mse.len());
    let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len() as f64;
    let (first, last) = (
        mean(&train_mse[..3]),
        mean(&train_mse[train_mse.len() - 3..]),
    );
    assert!(
        last < 0.5 * first,
        "the training loss did not fall: MSE {first} over the first three logged steps, {last} over \
         the last three"
    );
    let aux_ran = parsed
        .iter()
        .any(|v| v["metrics"]["aux_loss"].as_f64().is_some_and(|a| a > 0.0));
    assert!(
        aux_ran,
        "no step had dead latents, so the aux-k loss never ran"
    );
}

#[test]
fn crosscoder_exports_per_layer_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let s = run(dir.path(), &synthetic_config("crosscoder", "", 3), false);
    assert!(s.final_eval.unwrap().contains_key("heldout_fvu_layer2"));
    let w = weights(dir.path());
    assert_eq!(w["W_enc"].dims(), &[3, 16, 64]);
    assert_eq!(w["W_dec"].dims(), &[64, 3, 16]);
    assert_eq!(w["b_dec"].dims(), &[3, 16]);
}

/// Checkpoint folders of the run in `dir/run`, oldest first.
fn checkpoint_steps(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("run/checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("step-"))
        .collect();
    names.sort();
    names
}

#[test]
fn keep_checkpoints_keeps_the_newest_n() {
    let every_step = synthetic_config("batchtopk", "", 1)
        .replace("steps = 12", "steps = 5")
        .replace("checkpoint_every = 6", "checkpoint_every = 1");
    let all = tempfile::tempdir().unwrap();
    run(
        all.path(),
        &every_step.replace(
            "checkpoint_every = 1",
            "checkpoint_every = 1\nkeep_checkpoints = 0",
        ),
        false,
    );
    assert_eq!(checkpoint_steps(all.path()).len(), 5);
    let three = tempfile::tempdir().unwrap();
    run(
        three.path(),
        &every_step.replace(
            "checkpoint_every = 1",
            "checkpoint_every = 1\nkeep_checkpoints = 3",
        ),
        false,
    );
    assert_eq!(
        checkpoint_steps(three.path()),
        ["step-00000003", "step-00000004", "step-00000005"]
    );
    let default = tempfile::tempdir().unwrap();
    run(default.path(), &every_step, false);
    assert_eq!(
        checkpoint_steps(default.path()),
        ["step-00000004", "step-00000005"]
    );
}

#[test]
fn the_sort_baseline_runs_with_one_override_and_is_checked_against_profk() {
    let text = synthetic_config("batchtopk", "", 1).replace(
        "[log]",
        "[selector]\nkind = \"profk\"\ncompare = true\ncompare_every = 4\n[log]",
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("cfg.toml");
    std::fs::write(&cfg, text).unwrap();
    let s = sae::run::train_sae(&sae::run::RunOptions {
        config: cfg,
        overrides: vec!["selector.kind=sort".into()],
        out: Some(dir.path().join("run")),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(s.step, 12);
    let meta = std::fs::read_to_string(dir.path().join("run/run.json")).unwrap();
    let meta: serde_json::Value = serde_json::from_str(&meta).unwrap();
    assert_eq!(meta["selector"], "sort");
}
