//! The default pipeline in miniature: the tiny GPT-2 on the shipped corpus, on-the-fly activations, a few
//! steps, held-out FVU / L0 and CE-loss recovered with the SAE spliced in.
use sae::run::{train_sae, RunOptions};

#[test]
fn tiny_model_run_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    std::env::set_var("SPARSETRAIN_CACHE", dir.path());
    let text = std::fs::read_to_string("../configs/tiny.toml")
        .unwrap()
        .replace("steps = 600", "steps = 4")
        .replace("batch_size = 1024", "batch_size = 256")
        .replace("held_out_tokens = 4096", "held_out_tokens = 512")
        .replace("buffer_tokens = 65536", "buffer_tokens = 1024")
        .replace("latents = 1024", "latents = 256")
        .replace("compare_every = 100", "compare_every = 2")
        .replace("every = 10", "every = 2\nprogress = false");
    let cfg = dir.path().join("tiny.toml");
    std::fs::write(&cfg, text).unwrap();
    let s = train_sae(&RunOptions {
        config: cfg,
        out: Some(dir.path().join("run")),
        resume: false,
        ..Default::default()
    })
    .unwrap();
    let m = s.final_eval.unwrap();
    for key in [
        "heldout_fvu",
        "heldout_l0",
        "ce_clean",
        "ce_sae",
        "ce_zero_ablation",
        "ce_loss_recovered",
    ] {
        assert!(m[key].is_finite(), "{key} = {}", m[key]);
    }
    assert!((m["heldout_l0"] - 16.0).abs() < 1e-9);
    assert!(dir.path().join("run/sae/sae_weights.safetensors").is_file());
    let report = std::fs::read_to_string(dir.path().join("run/report.html")).unwrap();
    assert!(dir.path().join("run/features.json").is_file() && report.contains("id=\"features\""));
}
