//! The Weights & Biases bridge, offline. These tests need `python3` with the `wandb` package
//! (`pip install -r tools/requirements-wandb.txt`). Without it they print how to enable them and
//! pass, except under CI (`CI` set, as `.ci/run` sets it), which installs wandb: there they fail.

use harness::{
    metrics::read_records, LogConfig, Metrics, MetricsSink, Record, RunDir, RunMeta, SinkOptions,
    WandbOptions,
};
use std::path::{Path, PathBuf};
use std::process::Command;

fn python_has_wandb() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import wandb"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        let why = "python3 cannot import wandb; run `pip install -r tools/requirements-wandb.txt` \
                   to test the W&B bridge";
        assert!(std::env::var_os("CI").is_none(), "under CI: {why}");
        eprintln!("SKIPPED: {why}");
    }
    ok
}

/// Runs `cmd`, which must succeed; its stderr is the message when it does not.
fn succeeds(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Reads an offline W&B run file with the wandb package's own reader: (history rows, last row).
fn offline_history(run_dir: &Path) -> (usize, serde_json::Value) {
    let v = offline_records(run_dir);
    (v["rows"].as_u64().unwrap() as usize, v["last"].clone())
}

/// {"rows": history rows, "last": the last row, "metrics": {name or glob: its step metric},
/// "artifacts": [{"name", "type", "files"}]}.
fn offline_records(run_dir: &Path) -> serde_json::Value {
    let wandb_dir = run_dir.join("wandb");
    let offline: Vec<PathBuf> = std::fs::read_dir(&wandb_dir)
        .unwrap_or_else(|e| panic!("{}: {e}", wandb_dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("offline-run-")
        })
        .collect();
    assert_eq!(
        offline.len(),
        1,
        "one offline run in {}",
        wandb_dir.display()
    );
    let file = std::fs::read_dir(&offline[0])
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "wandb"))
        .expect("a .wandb file");
    let script = r#"
import json, sys
from wandb.sdk.internal import datastore
from wandb.proto import wandb_internal_pb2 as pb
ds = datastore.DataStore()
ds.open_for_scan(sys.argv[1])
rows, last, metrics, artifacts = 0, {}, {}, []
while (data := ds.scan_data()) is not None:
    r = pb.Record()
    r.ParseFromString(data)
    kind = r.WhichOneof("record_type")
    if kind == "history":
        rows += 1
        last = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
    elif kind == "metric":
        metrics[r.metric.name or r.metric.glob_name] = r.metric.step_metric
    elif kind == "artifact":
        files = sorted(e.path for e in r.artifact.manifest.contents)
        artifacts.append({"name": r.artifact.name, "type": r.artifact.type, "files": files})
print(json.dumps({"rows": rows, "last": last, "metrics": metrics, "artifacts": artifacts}))
"#;
    let out = succeeds(Command::new("python3").args(["-c", script]).arg(&file));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn log_some(sink: &MetricsSink, steps: u64) {
    for step in 1..=steps {
        let mut m = Metrics::new();
        m.insert("loss".into(), 1.0 / step as f64);
        m.insert("select_ms".into(), 0.25);
        sink.log(Record::train(step, step * 64, step as f64 * 0.1, m));
    }
    let mut e = Metrics::new();
    e.insert("fvu".into(), 0.5);
    sink.log(Record::eval(steps, steps * 64, steps as f64 * 0.1, e));
}

/// A run folder set up for W&B offline mode, in a temporary directory that lives as long as the first
/// value; None (the test is skipped) without a python that has wandb.
fn offline_run() -> Option<(tempfile::TempDir, RunDir, RunMeta, LogConfig)> {
    if !python_has_wandb() {
        return None;
    }
    let tmp = tempfile::tempdir().unwrap();
    let run = RunDir::create(tmp.path(), "tiny-profk").unwrap();
    let meta = RunMeta {
        config_name: "tiny".into(),
        selector: "profk".into(),
        task: "sae".into(),
        ..RunMeta::default()
    };
    run.write_meta(&meta).unwrap();
    run.write_config("[sae]\nk = 32\n", &serde_json::json!({"sae": {"k": 32}}))
        .unwrap();
    let meta = run.read_meta().unwrap();
    let log = LogConfig {
        wandb: true,
        wandb_mode: Some("offline".into()),
        ..LogConfig::default()
    };
    Some((tmp, run, meta, log))
}

#[test]
fn live_bridge_streams_every_step_into_an_offline_run() {
    let Some((_tmp, run, meta, log)) = offline_run() else {
        return;
    };
    let options = SinkOptions::for_run(&run, &meta, &log);
    let wandb = options.wandb.clone().unwrap();
    assert_eq!(wandb.group, "tiny");
    assert_eq!(wandb.tags, vec!["profk".to_string(), "sae".to_string()]);
    let sink = MetricsSink::create(&run, options).unwrap();
    log_some(&sink, 40);
    sink.finish().unwrap();

    assert_eq!(read_records(&run.metrics_path()).unwrap().len(), 41);
    let (rows, last) = offline_history(run.path());
    assert_eq!(
        rows, 40,
        "one W&B history row per step (eval merges into its step)"
    );
    assert_eq!(last["_step"], 40);
    assert_eq!(last["train/loss"], 1.0 / 40.0);
    assert_eq!(last["eval/fvu"], 0.5);
    assert_eq!(last["tokens"], 40 * 64);
    let metrics = &offline_records(run.path())["metrics"];
    assert_eq!(
        metrics["*"], "tokens",
        "every chart over training tokens: {metrics}"
    );
    assert!(
        metrics.get("tokens").is_some(),
        "tokens is defined: {metrics}"
    );
}

#[test]
fn replay_uploads_a_finished_run() {
    let Some((_tmp, run, _, _)) = offline_run() else {
        return;
    };
    let sink = MetricsSink::create(&run, SinkOptions::default()).unwrap();
    log_some(&sink, 25);
    sink.finish().unwrap();
    let bridge = runtime::workspace_file("tools/wandb_bridge.py");
    let out = succeeds(
        Command::new("python3")
            .arg(&bridge)
            .args(["replay", "--mode", "offline"])
            .arg(run.path()),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("logged 26 records"), "{stdout}");
    assert!(
        stdout.contains("wandb sync"),
        "tells how to upload: {stdout}"
    );
    let (rows, last) = offline_history(run.path());
    assert_eq!(rows, 25);
    assert_eq!(last["train/select_ms"], 0.25);
}

#[test]
fn without_python_or_wandb_the_run_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    // An interpreter that does not exist, and a python whose `import wandb` fails.
    let fake_pkg = tmp.path().join("fake");
    std::fs::create_dir(&fake_pkg).unwrap();
    std::fs::write(
        fake_pkg.join("wandb.py"),
        "raise ImportError('no wandb here')\n",
    )
    .unwrap();
    let wrapper = tmp.path().join("python-without-wandb");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nPYTHONPATH={} exec python3 \"$@\"\n",
            fake_pkg.display()
        ),
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    for python in [
        tmp.path().join("no-such-python").display().to_string(),
        wrapper.display().to_string(),
    ] {
        let run = RunDir::create(tmp.path(), "r").unwrap();
        let options = SinkOptions {
            wandb: Some(WandbOptions {
                project: "p".into(),
                group: "g".into(),
                name: "n".into(),
                dir: run.path().to_path_buf(),
                python,
                mode: Some("offline".into()),
                ..WandbOptions::default()
            }),
        };
        let sink = MetricsSink::create(&run, options).unwrap();
        log_some(&sink, 10);
        sink.finish().unwrap();
        assert_eq!(read_records(&run.metrics_path()).unwrap().len(), 11);
    }
}

#[test]
fn an_eval_with_latent_densities_logs_their_histogram() {
    let Some((_tmp, run, meta, log)) = offline_run() else {
        return;
    };
    let densities: Vec<f64> = (0..64).map(|i| f64::from(i) / 64.0).collect();
    let histogram = harness::latent_density::LatentDensity::of(5, 1000, &densities);
    histogram.write(&run).unwrap();
    let sink = MetricsSink::create(&run, SinkOptions::for_run(&run, &meta, &log)).unwrap();
    log_some(&sink, 5);
    sink.finish().unwrap();
    let (_, last) = offline_history(run.path());
    // The reader flattens the histogram's fields into keys under its name.
    let field = |f: &str| last[format!("eval/latent_density/{f}")].clone();
    assert_eq!(field("_type"), "histogram", "{last}");
    let counts: Vec<u64> = serde_json::from_value(field("values")).unwrap();
    assert_eq!(counts, histogram.counts, "the bins as written");
    assert_eq!(
        counts.iter().sum::<u64>(),
        63,
        "every latent but the dead one"
    );
    let bins: Vec<f64> = serde_json::from_value(field("bins")).unwrap();
    assert_eq!(bins, histogram.log10_edges);
}

#[test]
fn the_sae_folder_is_logged_as_an_artifact_of_the_run() {
    let Some((_tmp, run, _meta, log)) = offline_run() else {
        return;
    };
    let sae = run.path().join("sae");
    std::fs::create_dir(&sae).unwrap();
    std::fs::write(sae.join("cfg.json"), "{}").unwrap();
    std::fs::write(sae.join("sae_weights.safetensors"), [0u8; 64]).unwrap();
    harness::wandb::log_artifact(&run, &log, &sae, "sae", "model");
    let artifacts = &offline_records(run.path())["artifacts"];
    assert_eq!(artifacts.as_array().map(Vec::len), Some(1), "{artifacts}");
    let a = &artifacts[0];
    assert_eq!(a["type"], "model");
    assert!(
        a["name"].as_str().unwrap().starts_with("sae-tiny-profk-"),
        "named after the run: {a}"
    );
    assert_eq!(
        a["files"],
        serde_json::json!(["cfg.json", "sae_weights.safetensors"])
    );
}
