//! `sparsetrain-report RUN... --out FILE.html` (the report tool, named so no shell built-in shadows it).
use harness::{Metrics, Record, RunDir, RunMeta};
use std::path::Path;
use std::process::{Command, Output};

fn synthetic_run(root: &Path, config: &str, selector: &str, select_ms: f64, steps: u64) -> RunDir {
    let run = RunDir::create_at(&root.join(format!("{config}-{selector}"))).unwrap();
    run.write_meta(&RunMeta {
        config_name: config.into(),
        selector: selector.into(),
        task: "sae".into(),
        ..RunMeta::default()
    })
    .unwrap();
    let lines: String = (1..=steps)
        .map(|step| {
            let m = Metrics::from([
                ("step_ms".to_string(), 10.0 + select_ms),
                ("select_ms".to_string(), select_ms),
                ("loss".to_string(), 1.0 / step as f64),
            ]);
            Record::train(step, step * 4096, step as f64 * 0.01, m).to_json_line()
        })
        .collect();
    std::fs::write(run.metrics_path(), lines).unwrap();
    run
}

/// `sparsetrain-report RUN... --out OUT`.
fn report(runs: &[&Path], out: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sparsetrain-report"))
        .args(runs)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}

#[test]
fn cli_writes_a_report_and_names_a_missing_run_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let profk = synthetic_run(tmp.path(), "tiny", "profk", 0.5, 20);
    let out = tmp.path().join("r.html");
    let ok = report(&[profk.path()], &out);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(out.exists());

    let missing = tmp.path().join("no-such-run");
    let bad = report(&[profk.path(), &missing], &tmp.path().join("x.html"));
    assert!(!bad.status.success());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains("no-such-run") && stderr.contains("no such run directory"),
        "{stderr}"
    );
    assert!(!tmp.path().join("x.html").exists(), "no partial report");

    let no_metrics = tmp.path().join("empty");
    std::fs::create_dir(&no_metrics).unwrap();
    let bad = report(&[&no_metrics], &tmp.path().join("y.html"));
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a run directory"));
}

#[test]
fn report_refuses_to_overwrite_its_inputs() {
    let tmp = tempfile::tempdir().unwrap();
    let run_dir = synthetic_run(tmp.path(), "tiny", "profk", 0.5, 5);
    let metrics = run_dir.metrics_path();
    let before = std::fs::read(&metrics).unwrap();
    for name in ["metrics.jsonl", "run.json", "./metrics.jsonl"] {
        let out = run_dir.path().join(name);
        let bad = report(&[run_dir.path()], &out);
        let stderr = String::from_utf8_lossy(&bad.stderr);
        assert!(!bad.status.success(), "--out {name} succeeded");
        assert!(
            stderr.contains("also an input") && stderr.contains(name.trim_start_matches("./")),
            "{stderr}"
        );
    }
    assert_eq!(std::fs::read(&metrics).unwrap(), before, "metrics intact");
    let bad = report(&[run_dir.path()], Path::new("/dev/null"));
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("device node"));
    // The run's own report is fine.
    eval::report::write_run_report(&run_dir).unwrap();
}

#[test]
fn pair_compares_two_runs_whose_configs_differ_and_lists_the_keys() {
    let tmp = tempfile::tempdir().unwrap();
    let profk = synthetic_run(tmp.path(), "tiny", "profk", 0.5, 20);
    let sort = synthetic_run(tmp.path(), "tiny", "sort", 5.0, 20);
    profk
        .write_config(
            "",
            &serde_json::json!({"selector": {"kind": "profk"}, "sae": {"k": 32}}),
        )
        .unwrap();
    sort.write_config(
        "",
        &serde_json::json!({"selector": {"kind": "sort"}, "sae": {"k": 64}}),
    )
    .unwrap();
    let out = tmp.path().join("paired.html");
    let unpaired = report(&[profk.path(), sort.path()], &out);
    assert!(unpaired.status.success());
    let stdout = String::from_utf8_lossy(&unpaired.stdout);
    assert!(!stdout.contains("speed-up of profk"), "{stdout}");

    let paired = Command::new(env!("CARGO_BIN_EXE_sparsetrain-report"))
        .arg("--pair")
        .args([profk.path(), sort.path()])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&paired.stdout);
    assert!(
        paired.status.success(),
        "{}",
        String::from_utf8_lossy(&paired.stderr)
    );
    assert!(
        stdout.contains("speed-up of profk over tiny-sort") && stdout.contains("paired by --pair"),
        "{stdout}"
    );
    assert!(
        stdout.contains("config differs: sae.k = 32 vs 64"),
        "{stdout}"
    );
    let html = std::fs::read_to_string(&out).unwrap();
    assert!(html.contains("sae.k = 32 vs 64"));
}
