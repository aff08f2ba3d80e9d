//! The command-line contract of a training run, on tiny synthetic SAEs: SIGTERM and SIGINT at random
//! steps checkpoint and exit 128 + signal, and the resumed run ends with the same bytes as an
//! uninterrupted one; a second process on a run directory is refused, naming the holder; a lock left by
//! a killed process is taken over.
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const TRAIN_SAE: &str = env!("CARGO_BIN_EXE_train-sae");
const STEPS: u64 = 400;

fn config(dir: &Path, steps: u64) -> PathBuf {
    let path = dir.join("sig.toml");
    let text = format!(
        r#"name = "sig"
seed = 7
[data]
source = "synthetic"
d_model = 8
features = 24
active_per_token = 2
held_out_tokens = 64
[sae]
latents = 16
k = 2
[train]
batch_size = 32
steps = {steps}
lr = 1e-3
checkpoint_every = 5
[log]
every = 1
progress = false
"#
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn train(cfg: &Path, out: &Path, resume: bool) -> Command {
    let mut cmd = Command::new(TRAIN_SAE);
    cmd.arg(cfg).arg("--out").arg(out);
    if resume {
        cmd.arg("--resume");
    }
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd
}

fn finish(cmd: &mut Command) -> Output {
    cmd.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Lines of metrics.jsonl so far (the sink writes them as the steps go).
fn logged_steps(run: &Path) -> usize {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

fn signal(child: &Child, name: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(child.id().to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{name} failed");
}

/// Waits until `ready` holds (or the child has exited); false on exit or timeout.
fn wait_for(child: &mut Child, ready: impl Fn() -> bool) -> bool {
    let began = Instant::now();
    while began.elapsed() < Duration::from_secs(30) {
        if ready() {
            return true;
        }
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

fn wait_output(child: Child) -> Output {
    child.wait_with_output().unwrap()
}

/// The bytes a finished run leaves that must not depend on interruptions: the exported SAE and the
/// final checkpoint's tensors.
fn result_bytes(run: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let last = run.join("checkpoints").join(format!("step-{STEPS:08}"));
    // A synthetic run's SAE id is `sae`.
    for dir in [run.join("sae").join("sae"), last] {
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
            .collect();
        assert!(!names.is_empty(), "{}: no tensors", dir.display());
        names.sort();
        for p in names {
            out.push((p.display().to_string(), std::fs::read(&p).unwrap()));
        }
    }
    assert!(out.len() >= 2, "weights and training state");
    out.into_iter()
        .map(|(p, b)| (p.rsplit('/').take(2).collect::<Vec<_>>().join("<"), b))
        .collect()
}

/// A fixed pseudo-random sequence (no seeds from the clock: a failure must reproduce).
struct Lcg(u64);
impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Signals sent at random steps, half SIGTERM, half SIGINT.
const TRIALS: usize = 12;

#[test]
fn interrupted_runs_resume_to_the_bytes_of_an_uninterrupted_run() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), STEPS);
    let reference = tmp.path().join("reference");
    let done = finish(&mut train(&cfg, &reference, false));
    assert!(done.status.success(), "{}", text(&done.stderr));
    let want = result_bytes(&reference);

    let mut rng = Lcg(20261201);
    let mut interrupted = 0;
    for trial in 0..TRIALS {
        let (name, code) = if trial % 2 == 0 {
            ("TERM", 143)
        } else {
            ("INT", 130)
        };
        let out = tmp.path().join(format!("trial-{trial}"));
        let at = 1 + rng.below(STEPS * 3 / 4) as usize;
        let mut child = train(&cfg, &out, false).spawn().unwrap();
        let reached = wait_for(&mut child, || logged_steps(&out) >= at);
        if reached {
            signal(&child, name);
        }
        let first = wait_output(child);
        let stderr = text(&first.stderr);
        if reached && first.status.code() == Some(code) {
            interrupted += 1;
            let resume = format!("--out {} --resume", out.display());
            assert!(stderr.contains(&resume), "no resume command: {stderr}");
            assert!(stderr.contains(&format!("SIG{name}")), "{stderr}");
            let rest = finish(&mut train(&cfg, &out, true));
            assert!(rest.status.success(), "resume: {}", text(&rest.stderr));
        } else {
            // The run finished before the signal landed: it must have completed normally.
            assert!(
                first.status.success(),
                "trial {trial}: {:?} {stderr}",
                first.status
            );
        }
        assert_eq!(
            result_bytes(&out),
            want,
            "trial {trial} (SIG{name} after {at} steps)"
        );
    }
    assert!(
        interrupted >= TRIALS - 2,
        "only {interrupted} of {TRIALS} trials were interrupted"
    );
}

#[test]
fn a_second_process_is_refused_and_a_killed_holder_is_taken_over() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), 1_000_000);
    let out = tmp.path().join("run");
    let mut first = train(&cfg, &out, false).spawn().unwrap();
    assert!(wait_for(&mut first, || logged_steps(&out) >= 3));

    let second = finish(&mut train(&cfg, &out, true));
    assert!(!second.status.success());
    let stderr = text(&second.stderr);
    assert!(
        stderr.contains("in use by") && stderr.contains(&format!("pid {}", first.id())),
        "{stderr}"
    );
    assert!(
        stderr.contains("train-sae"),
        "the holder's command: {stderr}"
    );
    let fresh = finish(&mut train(&cfg, &out, false));
    assert!(!fresh.status.success(), "a fresh start on a running run");

    // SIGTERM twice: the second one quits at once, still with 143.
    signal(&first, "TERM");
    signal(&first, "TERM");
    let stopped = wait_output(first);
    assert_eq!(
        stopped.status.code(),
        Some(143),
        "{}",
        text(&stopped.stderr)
    );

    // kill -9 leaves the lock file behind with a dead holder; the kernel dropped the lock itself.
    let mut victim = train(&cfg, &out, true).spawn().unwrap();
    let victim_pid = victim.id();
    let before = logged_steps(&out);
    assert!(wait_for(&mut victim, || logged_steps(&out) > before + 2));
    victim.kill().unwrap();
    victim.wait().unwrap();
    let record = std::fs::read_to_string(out.join(".lock")).unwrap();
    assert!(
        record.contains(&format!("\"pid\":{victim_pid}")),
        "{record}"
    );

    let mut taker = train(&cfg, &out, true).spawn().unwrap();
    let after = logged_steps(&out);
    assert!(wait_for(&mut taker, || logged_steps(&out) > after));
    signal(&taker, "INT");
    let mut stderr = String::new();
    taker
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = taker.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains(&format!("pid {victim_pid}")) && stderr.contains("taking it over"),
        "{stderr}"
    );
}

#[test]
fn overrides_are_checked_recorded_and_progress_lines_reach_a_pipe() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), 50);
    let bad = finish(
        Command::new(TRAIN_SAE)
            .arg(&cfg)
            .args(["--set", "train.stepz=3", "--out"])
            .arg(tmp.path().join("bad")),
    );
    assert!(!bad.status.success());
    assert!(text(&bad.stderr).contains("stepz"), "{}", text(&bad.stderr));
    assert!(
        !tmp.path().join("bad").exists(),
        "a refused config leaves no directory"
    );

    let out = tmp.path().join("run");
    let ok = finish(
        Command::new(TRAIN_SAE)
            .arg(&cfg)
            .args([
                "--set",
                "train.steps=6",
                "--set",
                "log.progress=true",
                "--out",
            ])
            .arg(&out),
    );
    let stderr = text(&ok.stderr);
    assert!(ok.status.success(), "{stderr}");
    assert!(
        stderr.contains("step 6/6 (100%)"),
        "progress lines on a pipe: {stderr}"
    );
    let resolved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(resolved["train"]["steps"], 6);
    let toml = std::fs::read_to_string(out.join("config.toml")).unwrap();
    assert!(toml.contains("--set train.steps=6"), "{toml}");

    // Resuming with a changed learning rate is refused, naming the key; more steps are fine.
    let resume_with = |set: &str| {
        finish(
            Command::new(TRAIN_SAE)
                .arg(&cfg)
                .args(["--set", set, "--out"])
                .arg(&out)
                .arg("--resume"),
        )
    };
    let changed = resume_with("train.lr=0.5");
    assert!(!changed.status.success());
    // ... with the value the run started with and the new one.
    let refused = text(&changed.stderr);
    assert!(
        refused.contains("train.lr")
            && refused.contains("was 0.001")
            && refused.contains("now 0.5"),
        "{refused}"
    );
    let longer = resume_with("train.steps=8");
    assert!(longer.status.success(), "{}", text(&longer.stderr));
}

#[test]
fn every_binary_has_a_version() {
    for exe in [
        TRAIN_SAE,
        env!("CARGO_BIN_EXE_extract"),
        env!("CARGO_BIN_EXE_finetune"),
        env!("CARGO_BIN_EXE_sparsetrain-report"),
        env!("CARGO_BIN_EXE_profk"),
    ] {
        let out = Command::new(exe).arg("--version").output().unwrap();
        assert!(out.status.success(), "{exe} --version");
        let line = text(&out.stdout);
        // `NAME 0.1.0 (commit <hex or unknown>[, dirty]; features: ...)`, as this build was made.
        let build = runtime::build_info!();
        assert_eq!(
            build.features.iter().any(|f| f == "cuda"),
            cfg!(feature = "cuda")
        );
        // Built from a git checkout: the commit is the checkout's.
        let head = Command::new("git").args(["rev-parse", "HEAD"]).output();
        if let Some(head) = head.ok().filter(|h| h.status.success()) {
            assert_eq!(build.commit, text(&head.stdout).trim());
        }
        assert!(line.contains(env!("CARGO_PKG_VERSION")), "{exe}: {line}");
        assert!(
            line.contains(&format!("(commit {}", build.short_commit())),
            "{exe}: {line}"
        );
        assert_eq!(line.contains(", dirty"), build.dirty, "{exe}: {line}");
        let features = if build.features.is_empty() {
            "none".to_string()
        } else {
            build.features.join(", ")
        };
        assert!(
            line.contains(&format!("features: {features})")),
            "{exe}: {line}"
        );
    }
}
