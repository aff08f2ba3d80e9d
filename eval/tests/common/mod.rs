//! Synthetic finished runs for the report tests: made-up train and eval records under fixed conditions.

#![allow(dead_code)]

use harness::{Metrics, Record, RunDir, RunMeta};
use std::path::Path;

/// The conditions every synthetic run ran under.
pub fn provenance() -> harness::Provenance {
    harness::Provenance {
        host: "node-1".into(),
        cpu: "Some CPU".into(),
        gpus: vec!["NVIDIA H100 80GB HBM3".into()],
        gpu_driver: "550.54.15".into(),
        build: harness::BuildInfo {
            version: "0.1.0".into(),
            commit: "0123456789abcdef0123456789abcdef01234567".into(),
            dirty: false,
            features: vec!["cuda".into()],
        },
        model_sha256: Some("sha256:feed".into()),
    }
}

/// Writes a finished synthetic run: `steps` train records with step and select times, an eval record.
pub fn synthetic_run(
    root: &Path,
    config: &str,
    selector: &str,
    select_ms: f64,
    steps: u64,
) -> RunDir {
    let run = RunDir::create_at(&root.join(format!("{config}-{selector}"))).expect("run dir");
    run.write_meta(&RunMeta {
        config_name: config.into(),
        selector: selector.into(),
        task: "sae".into(),
        provenance: Some(provenance()),
        ..RunMeta::default()
    })
    .expect("meta");
    let resolved = serde_json::json!({
        "name": config,
        "device": "cpu",
        "selector": {"kind": selector},
        "sae": {"k": 32, "latents": 4096},
        "train": {"steps": steps, "batch_size": 4096},
    });
    run.write_config("", &resolved).expect("config");
    let mut lines = String::new();
    for step in 1..=steps {
        let mut m = Metrics::new();
        let wobble = ((step as f64) * 0.7).sin() * 0.3;
        m.insert("step_ms".into(), 10.0 + select_ms + wobble);
        m.insert("select_ms".into(), select_ms * (1.0 + 0.1 * wobble));
        m.insert("select_share".into(), select_ms / (10.0 + select_ms));
        m.insert("loss".into(), 1.0 / (step as f64).sqrt());
        m.insert("l0".into(), 32.0 + wobble);
        if selector == "profk" {
            m.insert("only_in_profk".into(), step as f64);
        }
        lines.push_str(&Record::train(step, step * 4096, step as f64 * 0.01, m).to_json_line());
    }
    let mut e = Metrics::new();
    e.insert("fvu".into(), 0.2);
    e.insert("ce_loss_recovered".into(), f64::NAN);
    lines.push_str(&Record::eval(steps, steps * 4096, steps as f64 * 0.01, e).to_json_line());
    std::fs::write(run.metrics_path(), lines).expect("metrics");
    run
}
