//! Extraction keeps nothing bad: a corrupt or truncated shard left by an earlier run is re-made, not
//! reused, and a full disk (a real EFBIG: the `extract` binary under RLIMIT_FSIZE) fails with the path,
//! leaves no temporary and no manifest, and the rerun then completes to the same bytes.
use activations::corpus::default_corpus;
use activations::shards::{extract, ExtractConfig, ExtractOptions};
use candle_core::{DType, Device};
use gpt2::{Gpt2, Gpt2Config};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Gpt2Config::miniature(2);
    Gpt2::random(cfg, 5, DType::F32, &Device::Cpu)
        .unwrap()
        .save_hf(&dir.path().join("model"))
        .unwrap();
    let text: String = default_corpus().documents[0]
        .text
        .chars()
        .take(8_000)
        .collect();
    std::fs::write(dir.path().join("corpus.txt"), text).unwrap();
    Fixture {
        root: dir.path().to_path_buf(),
        _dir: dir,
    }
}

/// 4 shards of 500 tokens of 2 x 32 f32 (128 KB each).
fn config_text(f: &Fixture, out: &str) -> String {
    format!(
        r#"
model = "{}"
out_dir = "{}"
hook_points = ["resid_pre.1", "resid_post.1"]
tokens_per_shard = 500
batch_contexts = 4
writer_threads = 2
[data]
corpus = "{}"
split = "all"
context = 16
max_tokens = 2000
"#,
        f.root.join("model").display(),
        f.root.join(out).display(),
        f.root.join("corpus.txt").display()
    )
}

fn config(f: &Fixture, out: &str) -> ExtractConfig {
    ExtractConfig::from_toml(&config_text(f, out), Path::new("test.toml")).unwrap()
}

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    v.sort();
    v
}

#[test]
fn corrupt_and_truncated_shards_are_re_made() {
    let f = fixture();
    let cfg = config(&f, "acts");
    let first = extract(&cfg, &ExtractOptions::default()).unwrap();
    assert_eq!(first.manifest.shards.len(), 4);
    let reference = files(&cfg.out_dir);

    // One flipped bit in the activations of a finished extraction: only the manifest's hash tells.
    let shard = cfg.out_dir.join("shard-00002.safetensors");
    let mut bytes = std::fs::read(&shard).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x10;
    std::fs::write(&shard, &bytes).unwrap();
    let again = extract(&cfg, &ExtractOptions::default()).unwrap();
    assert_eq!(
        again.shards_remade,
        vec!["shard-00002.safetensors".to_string()]
    );
    assert_eq!((again.shards_reused, again.shards_written), (3, 1));
    assert_eq!(files(&cfg.out_dir), reference, "re-made to the same bytes");

    // An interrupted run (no manifest) that left a truncated shard: its header no longer fits the file.
    std::fs::remove_file(cfg.out_dir.join("manifest.json")).unwrap();
    let shard = cfg.out_dir.join("shard-00001.safetensors");
    let len = std::fs::metadata(&shard).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&shard)
        .unwrap()
        .set_len(len - 100)
        .unwrap();
    let again = extract(&cfg, &ExtractOptions::default()).unwrap();
    assert_eq!(
        again.shards_remade,
        vec!["shard-00001.safetensors".to_string()]
    );
    assert_eq!(files(&cfg.out_dir), reference);

    // A clean rerun re-makes nothing.
    let clean = extract(&cfg, &ExtractOptions::default()).unwrap();
    assert!(clean.shards_remade.is_empty() && clean.shards_reused == 4);
}

/// Runs the `extract` binary on `cfg`, optionally under a file-size limit.
fn run_extract(cfg: &Path, file_limit: Option<u64>) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_extract"));
    cmd.arg(cfg).arg("--quiet");
    if let Some(limit) = file_limit {
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                let l = libc::rlimit {
                    rlim_cur: limit as libc::rlim_t,
                    rlim_max: limit as libc::rlim_t,
                };
                if libc::setrlimit(libc::RLIMIT_FSIZE, &l) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    cmd.output().unwrap()
}

#[test]
fn a_full_disk_fails_cleanly_and_the_rerun_completes() {
    let f = fixture();
    let reference = config(&f, "reference");
    extract(&reference, &ExtractOptions::default()).unwrap();
    let cfg = f.root.join("extract.toml");
    std::fs::write(&cfg, config_text(&f, "acts")).unwrap();
    let out = f.root.join("acts");

    // A shard is 128 KB: the first write past 64 KB fails with EFBIG.
    let failed = run_extract(&cfg, Some(64 << 10));
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(!failed.status.success(), "must fail: {stderr}");
    assert!(
        stderr.contains("writing") && stderr.contains("shard-0000") && stderr.contains("too large"),
        "the error names the operation and the file: {stderr}"
    );
    let left: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        left.iter()
            .all(|n| !n.ends_with(".tmp") && n != "manifest.json"),
        "left behind: {left:?}"
    );

    let rerun = run_extract(&cfg, None);
    assert!(
        rerun.status.success(),
        "{}",
        String::from_utf8_lossy(&rerun.stderr)
    );
    assert_eq!(files(&out), files(&reference.out_dir));
}
