//! Records the git commit the command-line tools are built from, and whether their sources differ
//! from it, so that run.json and `--version` name the build even when a binary runs outside the
//! checkout (`sparsetrain::build_info()`). A build outside a git checkout records "unknown", or
//! `SPARSETRAIN_GIT_COMMIT` when the environment sets it.
use std::path::Path;
use std::process::Command;

/// The sources of the binaries: a change in one of them makes a build differ from its commit.
const ROOT_SOURCES: [&str; 6] = [
    "Cargo.toml",
    "Cargo.lock",
    "build.rs",
    "cli.rs",
    "train.rs",
    "bin",
];
const MEMBERS: [&str; 8] = [
    "runtime",
    "profk",
    "gpt2",
    "activations",
    "sae",
    "gradsparse",
    "eval",
    "cuda-build",
];
const MEMBER_SOURCES: [&str; 5] = ["Cargo.toml", "build.rs", "src", "kernels", "assets"];

fn main() {
    let sources: Vec<String> = ROOT_SOURCES
        .iter()
        .map(|s| s.to_string())
        .chain(
            MEMBERS
                .iter()
                .flat_map(|m| MEMBER_SOURCES.iter().map(move |s| format!("{m}/{s}"))),
        )
        .filter(|p| Path::new(p).exists())
        .collect();
    for path in &sources {
        println!("cargo:rerun-if-changed={path}");
    }
    println!("cargo:rerun-if-env-changed=SPARSETRAIN_GIT_COMMIT");
    // HEAD moves on a commit or checkout; its reflog changes with every move.
    for name in ["HEAD", "logs/HEAD"] {
        if let Some(path) = git(&["rev-parse", "--git-path", name]) {
            if Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    let (commit, dirty) = match std::env::var("SPARSETRAIN_GIT_COMMIT") {
        Ok(commit) if !commit.trim().is_empty() => (commit.trim().to_string(), false),
        _ => match git(&["rev-parse", "HEAD"]) {
            Some(commit) => {
                let mut args = vec!["status", "--porcelain", "--untracked-files=no", "--"];
                args.extend(sources.iter().map(String::as_str));
                let changed = git(&args).is_none_or(|out| !out.is_empty());
                (commit, changed)
            }
            None => ("unknown".to_string(), false),
        },
    };
    println!("cargo:rustc-env=SPARSETRAIN_GIT_COMMIT={commit}");
    println!(
        "cargo:rustc-env=SPARSETRAIN_GIT_DIRTY={}",
        if dirty { "1" } else { "0" }
    );
}

/// Trimmed stdout of a successful `git ARGS`; `None` without git or outside a checkout. Optional locks
/// off: `git status` must not rewrite the index (that would make the next build rerun this script).
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .env("GIT_OPTIONAL_LOCKS", "0")
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}
