//! A disk that fills up during a checkpoint: the error names the file, no half-written checkpoint is
//! left or pointed at, and the resume after space is freed goes through. The full disk is real: a child
//! process runs under RLIMIT_FSIZE (with SIGXFSZ ignored, so writes past the limit fail with EFBIG).
use crate::common;
use common::synthetic_config;
use sae::run::{train_sae, RunOptions};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const CHILD_CONFIG: &str = "SPARSETRAIN_TEST_CHILD_CONFIG";
const CHILD_OUT: &str = "SPARSETRAIN_TEST_CHILD_OUT";
/// Larger than metrics.jsonl and the JSON files, smaller than the SAE's weights (4096 x 16 x 2 f32s).
const FILE_LIMIT: u64 = 256 << 10;

fn config(steps: u64) -> String {
    synthetic_config("batchtopk", "", 1)
        .replace("latents = 64", "latents = 4096")
        .replace("steps = 12", &format!("steps = {steps}"))
}

fn resume(cfg: &Path, out: &Path) -> sae::Result<sae::run::RunSummary> {
    train_sae(&RunOptions {
        config: cfg.to_path_buf(),
        out: Some(out.to_path_buf()),
        resume: true,
        ..Default::default()
    })
}

fn temporaries(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.to_string_lossy().ends_with(".tmp") {
            found.push(path.clone());
        }
        if path.is_dir() {
            found.extend(temporaries(&path));
        }
    }
    found
}

/// Run by the parent test in a child process with the file-size limit.
#[test]
#[ignore = "the child half of a_full_disk_during_a_checkpoint_loses_nothing"]
fn child_resume_under_a_file_size_limit() {
    let (Some(cfg), Some(out)) = (std::env::var_os(CHILD_CONFIG), std::env::var_os(CHILD_OUT))
    else {
        return;
    };
    if let Err(e) = resume(Path::new(&cfg), Path::new(&out)) {
        eprintln!("CHILD ERROR: {e}");
        std::process::exit(3);
    }
}

#[test]
fn a_full_disk_during_a_checkpoint_loses_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (short, long) = (tmp.path().join("short.toml"), tmp.path().join("long.toml"));
    std::fs::write(&short, config(6)).unwrap();
    std::fs::write(&long, config(12)).unwrap();
    let out = tmp.path().join("run");
    train_sae(&RunOptions {
        config: short,
        out: Some(out.clone()),
        resume: false,
        ..Default::default()
    })
    .unwrap();

    let mut child = Command::new(std::env::current_exe().unwrap());
    child
        .args([
            "robust_disk_full::child_resume_under_a_file_size_limit",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_CONFIG, &long)
        .env(CHILD_OUT, &out);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        child.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let limit = libc::rlimit {
                rlim_cur: FILE_LIMIT as libc::rlim_t,
                rlim_max: FILE_LIMIT as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let ran = child.output().unwrap();
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert_eq!(ran.status.code(), Some(3), "the child must fail: {stderr}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("CHILD ERROR"))
        .unwrap_or_default();
    assert!(
        line.contains("checkpoints/.step-00000012") && line.contains(".safetensors"),
        "the error names the file: {line}"
    );
    assert!(line.contains("too large"), "{line}");
    assert_eq!(temporaries(&out), Vec::<PathBuf>::new(), "temporaries left");
    let latest =
        harness::train_loop::resume_point(&harness::RunDir::open_existing(&out).unwrap()).unwrap();
    assert_eq!(
        latest.progress.step, 6,
        "latest stays on the complete checkpoint"
    );

    // Space freed: the same resume finishes.
    let done = resume(&long, &out).unwrap();
    assert_eq!(done.step, 12);
}
