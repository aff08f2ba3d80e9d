//! `features RUN_DIR`: dashboards of a finished tiny run rebuilt with latents asked for by index, the
//! Neuronpedia export beside them, and a clear refusal of a latent the SAE does not have.
use std::path::Path;
use std::process::{Command, Output};

/// configs/tiny.toml cut to a few steps on a small held-out split.
fn quick_tiny_config() -> String {
    let mut text = std::fs::read_to_string("configs/tiny.toml").unwrap();
    for (from, to) in [
        ("steps = 600", "steps = 2"),
        ("batch_size = 1024", "batch_size = 256"),
        ("held_out_tokens = 4096", "held_out_tokens = 512"),
        ("buffer_tokens = 65536", "buffer_tokens = 1024"),
        ("latents = 1024", "latents = 256"),
        ("compare_every = 100", "compare_every = 2"),
        ("every = 10", "every = 2\nprogress = false"),
    ] {
        assert!(
            text.contains(from),
            "configs/tiny.toml no longer has {from}"
        );
        text = text.replace(from, to);
    }
    text
}

fn features(run: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_features"))
        .arg(run)
        .args(args)
        .output()
        .unwrap()
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn features_rebuilds_dashboards_with_asked_latents_and_exports_them() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("tiny.toml");
    std::fs::write(&cfg, quick_tiny_config()).unwrap();
    let run = tmp.path().join("run");
    let train = Command::new(env!("CARGO_BIN_EXE_train-sae"))
        .arg(&cfg)
        .arg("--out")
        .arg(&run)
        .env("SPARSETRAIN_CACHE", tmp.path())
        .output()
        .unwrap();
    assert!(
        train.status.success(),
        "{}",
        String::from_utf8_lossy(&train.stderr)
    );

    let np = tmp.path().join("np");
    let out = features(
        &run,
        &[
            "--latents",
            "7,200",
            "--sample",
            "3",
            "--tokens",
            "1024",
            "--neuronpedia",
            np.to_str().unwrap(),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let f = json(&run.join("features.json"));
    let latents = f["latents"].as_array().unwrap();
    let asked: Vec<u64> = latents
        .iter()
        .filter(|l| l["requested"] == true)
        .map(|l| l["index"].as_u64().unwrap())
        .collect();
    assert!(latents.len() <= 5 && asked.iter().all(|i| [7, 200].contains(i)));
    for i in [7, 200] {
        let l = latents.iter().find(|l| l["index"] == i).unwrap();
        assert_eq!(l["promoted"].as_array().unwrap().len(), 10, "latent {i}");
        assert_eq!(l["suppressed"].as_array().unwrap().len(), 10, "latent {i}");
    }
    let report = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(report.contains("id=\"latent-lookup\"") && report.contains("data-latent=\"200\""));

    let batch =
        json(&np.join("tiny_sparsetrain-resid_post_blocks.2.hook_resid_post_256/batch-0.json"));
    assert_eq!(batch["features"].as_array().unwrap().len(), latents.len());
    assert_eq!(batch["model_id"], "tiny");
    assert_eq!(batch["layer"], 2);

    let bad = features(&run, &["--latents", "256"]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success());
    assert!(
        err.contains("latent 256") && err.contains("256 latents"),
        "{err}"
    );

    let version = features(&run, &["--version"]);
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("features "));
}
