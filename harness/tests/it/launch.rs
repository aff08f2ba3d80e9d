//! The launcher: a fresh run that fails before its first step leaves no directory; a resume with a
//! changed config is refused naming the key; a second launcher on a locked directory is refused.
use crate::common;

use common::FakeTrainer;
use harness::{Launch, LaunchSpec, LogConfig, LoopConfig};
use runtime::{config::ConfigSource, signal::StopSignal};
use std::path::Path;

pub(crate) fn spec(root: &Path, lr: f64, steps: u64, resume: bool) -> LaunchSpec {
    let text = format!("name = \"fake\"\n[train]\nsteps = {steps}\nlr = {lr}\n");
    let source = ConfigSource::from_text(&root.join("fake.toml"), text.clone(), &[]).unwrap();
    let resolved: toml::Table = toml::from_str(&text).unwrap();
    LaunchSpec {
        command: "fake".into(),
        task: "fake".into(),
        source,
        resolved: serde_json::to_value(resolved).unwrap(),
        name: "fake".into(),
        selector: "profk".into(),
        resumable: vec!["train.steps".into()],
        out: Some(root.join("run")),
        resume,
        runs_root: root.join("runs"),
        log: LogConfig {
            progress: false,
            ..LogConfig::default()
        },
        build: harness::BuildInfo {
            version: "9.9.9".into(),
            commit: "0123456789abcdef0123456789abcdef01234567".into(),
            dirty: true,
            features: vec!["cuda".into()],
        },
        model_sha256: Some("sha256:00ff".into()),
    }
}

fn train(
    launch: Launch,
    trainer: &mut FakeTrainer,
    steps: u64,
) -> harness::Result<harness::Finished> {
    let mut cfg = LoopConfig::new(steps, &LogConfig::default());
    cfg.progress_bar = false;
    let start = launch.resume_from().map(|c| c.progress).unwrap_or_default();
    launch.train(trainer, &cfg, start, Default::default(), &StopSignal::new())
}

#[test]
fn a_failed_start_leaves_no_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    // Failing while building the trainer: the launch is dropped unused.
    drop(Launch::open(spec(tmp.path(), 0.1, 4, false)).unwrap());
    assert!(!run.exists());
    // Failing in the first step.
    let launch = Launch::open(spec(tmp.path(), 0.1, 4, false)).unwrap();
    let mut trainer = FakeTrainer::new(0.1);
    trainer.fail_at = Some(0);
    assert!(train(launch, &mut trainer, 4).is_err());
    assert!(!run.exists());
    // An --out that existed before stays, emptied of the run's files.
    std::fs::create_dir(&run).unwrap();
    drop(Launch::open(spec(tmp.path(), 0.1, 4, false)).unwrap());
    assert!(run.is_dir());
    assert_eq!(std::fs::read_dir(&run).unwrap().count(), 0);
    // And the rerun goes ahead.
    let launch = Launch::open(spec(tmp.path(), 0.1, 4, false)).unwrap();
    let done = train(launch, &mut FakeTrainer::new(0.1), 4).unwrap();
    assert_eq!((done.exit_code(), done.summary.progress.step), (0, 4));
}

#[test]
fn resumes_check_the_config_and_the_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let launch = Launch::open(spec(tmp.path(), 0.1, 4, false)).unwrap();
    train(launch, &mut FakeTrainer::new(0.1), 4).unwrap();

    let err = Launch::open(spec(tmp.path(), 0.2, 8, true))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("train.lr") && err.contains("was 0.1") && err.contains("now 0.2"),
        "{err}"
    );
    let err = Launch::open(spec(tmp.path(), 0.1, 8, false))
        .unwrap_err()
        .to_string();
    assert!(err.contains("already holds a run"), "{err}");

    let launch = Launch::open(spec(tmp.path(), 0.1, 8, true)).unwrap();
    let second = Launch::open(spec(tmp.path(), 0.1, 8, true))
        .unwrap_err()
        .to_string();
    assert!(
        second.contains(&format!("pid {}", std::process::id())),
        "{second}"
    );
    let ckpt = launch.resume_from().unwrap().dir.clone();
    let mut trainer = FakeTrainer::load(&ckpt, 0.1);
    let done = train(launch, &mut trainer, 8).unwrap();
    assert_eq!(done.summary.progress.step, 8);
}

#[test]
fn an_out_that_would_overwrite_the_config_or_is_a_file_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    // The config is <out>/config.toml: the run's resolved copy would replace it.
    let folder = tmp.path().join("myrun");
    std::fs::create_dir(&folder).unwrap();
    let config = folder.join("config.toml");
    std::fs::write(&config, "name = \"fake\"\n").unwrap();
    let mut s = spec(tmp.path(), 0.1, 4, false);
    s.source = ConfigSource::from_text(&config, "name = \"fake\"\n".into(), &[]).unwrap();
    s.out = Some(folder.clone());
    let err = Launch::open(s).unwrap_err().to_string();
    assert!(
        err.contains("myrun") && err.contains("overwrite") && err.contains("config.toml"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        "name = \"fake\"\n"
    );
    // The same config beside another --out is fine.
    let mut s = spec(tmp.path(), 0.1, 4, false);
    s.source = ConfigSource::from_text(&config, "name = \"fake\"\n".into(), &[]).unwrap();
    s.out = Some(folder.join("run"));
    drop(Launch::open(s).unwrap());
    // An --out that is a file.
    let file = tmp.path().join("plain");
    std::fs::write(&file, "x").unwrap();
    let mut s = spec(tmp.path(), 0.1, 4, false);
    s.out = Some(file.clone());
    let err = Launch::open(s).unwrap_err().to_string();
    assert!(err.contains("--out names a directory"), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
}

#[test]
fn a_step_failing_on_its_data_checkpoints_the_last_step_first() {
    let tmp = tempfile::tempdir().unwrap();
    let launch = Launch::open(spec(tmp.path(), 0.1, 8, false)).unwrap();
    let mut trainer = FakeTrainer::new(0.1);
    trainer.fail_at = Some(5);
    trainer.fail_intact = true;
    assert!(train(launch, &mut trainer, 8).is_err());
    let launch = Launch::open(spec(tmp.path(), 0.1, 8, true)).unwrap();
    assert_eq!(launch.resume_from().map(|c| c.progress.step), Some(5));
    // A failure that may have touched the state leaves no such checkpoint.
    let other = tempfile::tempdir().unwrap();
    let launch = Launch::open(spec(other.path(), 0.1, 8, false)).unwrap();
    let mut trainer = FakeTrainer::new(0.1);
    trainer.fail_at = Some(5);
    assert!(train(launch, &mut trainer, 8).is_err());
    assert!(Launch::open(spec(other.path(), 0.1, 8, true)).is_err());
}

#[test]
fn run_json_records_where_and_with_what_the_run_ran() {
    let tmp = tempfile::tempdir().unwrap();
    let launch = Launch::open(spec(tmp.path(), 0.1, 2, false)).unwrap();
    let dir = launch.run_dir().clone();
    train(launch, &mut FakeTrainer::new(0.1), 2).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("run.json")).unwrap())
            .unwrap();
    let p = &json["provenance"];
    for key in ["host", "cpu", "gpu_driver"] {
        let v = p[key].as_str().unwrap_or_default();
        assert!(!v.is_empty(), "provenance.{key} in {json}");
    }
    assert!(p["gpus"].is_array(), "{json}");
    assert_eq!(
        p["build"]["commit"],
        "0123456789abcdef0123456789abcdef01234567"
    );
    assert_eq!(p["build"]["dirty"], true);
    assert_eq!(p["build"]["version"], "9.9.9");
    assert_eq!(p["build"]["features"], serde_json::json!(["cuda"]));
    assert_eq!(p["model_sha256"], "sha256:00ff");
    assert_eq!(
        p["host"].as_str().unwrap(),
        runtime::host::host_name(),
        "the host as the lock file names it"
    );
    // A resume under another build keeps the earlier conditions beside the new ones.
    let mut resumed = spec(tmp.path(), 0.1, 4, true);
    resumed.build.dirty = false;
    let launch = Launch::open(resumed).unwrap();
    let mut trainer = FakeTrainer::load(&launch.resume_from().unwrap().dir, 0.1);
    train(launch, &mut trainer, 4).unwrap();
    let meta = dir.read_meta().unwrap();
    assert!(!meta.provenance.unwrap().build.dirty);
    assert_eq!(meta.earlier_provenance.len(), 1);
    assert!(meta.earlier_provenance[0].build.dirty);
}
