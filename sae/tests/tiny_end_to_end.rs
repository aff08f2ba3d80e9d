//! The default pipeline in miniature: the tiny GPT-2 on the shipped corpus, on-the-fly activations, a few
//! steps, held-out FVU / L0 and CE-loss recovered with the SAE spliced in.
mod common;

#[test]
fn tiny_model_run_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    std::env::set_var("SPARSETRAIN_CACHE", dir.path());
    let text = common::quick_tiny_config(&[]);
    let s = common::run(dir.path(), &text, false);
    let m = s.final_eval.unwrap();
    for key in common::FINAL_EVAL_KEYS {
        assert!(m[key].is_finite(), "{key} = {}", m[key]);
    }
    assert!((m["heldout_l0"] - 16.0).abs() < 1e-9);
    // The SAE as a Hub repository: a folder per SAE id, and the release's entry beside it.
    let sae = dir.path().join("run/sae/blocks.2.hook_resid_post");
    assert!(sae.join("sae_weights.safetensors").is_file() && sae.join("cfg.json").is_file());
    let release = std::fs::read_to_string(dir.path().join("run/sae/pretrained_saes.yaml")).unwrap();
    assert!(
        release.contains("  - id: \"blocks.2.hook_resid_post\"\n"),
        "{release}"
    );
    let report = std::fs::read_to_string(dir.path().join("run/report.html")).unwrap();
    assert!(dir.path().join("run/features.json").is_file() && report.contains("id=\"features\""));
    // run.json names the weights read: the shipped model's bytes, as the asset file hashes.
    let meta = harness::RunDir::open_existing(&dir.path().join("run"))
        .unwrap()
        .read_meta()
        .unwrap();
    let asset = runtime::workspace_file("activations/assets/tiny-gpt2.safetensors.zst");
    assert_eq!(
        meta.provenance.unwrap().model_sha256,
        Some(activations::models::files_sha256(&[asset]).unwrap())
    );
    // The held-out evaluation's latent densities, for the W&B histogram.
    let densities = std::fs::read_dir(dir.path().join("run/latent_density"))
        .unwrap()
        .count();
    assert_eq!(densities, 1);
}
