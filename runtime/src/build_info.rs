//! What a binary was built from: the package version, the git commit (and whether the tree had
//! uncommitted changes) and the cargo features the command-line package was built with.
//!
//! The commit and features are known only to a build script, and only the root package's build
//! script sees the features the user asked for (`--features cuda` enables `cuda` in every crate, but
//! `hf-hub` or `bench` only in some). So the root build script calls [`emit`], which hands them to
//! its crate's compiler as environment variables, and the binaries read them with [`build_info!`]:
//!
//! ```ignore
//! // build.rs of the command-line package
//! fn main() { runtime::build_info::emit(); }
//! // a binary of that package
//! let info = runtime::build_info!();
//! println!("{info}"); // 0.1.0 (commit 1a2b3c4d5e6f, dirty; features: cuda)
//! ```
//!
//! A library that records provenance (run.json) reads what the binary [`record`]ed at its start.
use std::fmt;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

/// The commit when the build had no git checkout to ask (a source archive, no `git` installed).
pub const UNKNOWN_COMMIT: &str = "unknown";

/// The environment variables [`emit`] sets for the compiler and [`build_info!`] reads.
pub const COMMIT_VAR: &str = "SPARSETRAIN_BUILD_COMMIT";
pub const DIRTY_VAR: &str = "SPARSETRAIN_BUILD_DIRTY";
pub const FEATURES_VAR: &str = "SPARSETRAIN_BUILD_FEATURES";
/// The whole `--version` line ([`BuildInfo`]'s `Display`), for clap's `#[command(version = ...)]`.
pub const LINE_VAR: &str = "SPARSETRAIN_BUILD_LINE";

/// Version, commit and features of a build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildInfo {
    /// The package version (`CARGO_PKG_VERSION`).
    pub version: String,
    /// The full commit hash, or [`UNKNOWN_COMMIT`].
    pub commit: String,
    /// The working tree differed from the commit (tracked files changed) when it was built.
    pub dirty: bool,
    /// The command-line package's enabled cargo features, sorted.
    pub features: Vec<String>,
}

impl BuildInfo {
    /// From the values [`emit`] wrote: `features` comma-separated, `dirty` "true" or "false".
    pub fn from_parts(version: &str, commit: &str, dirty: &str, features: &str) -> BuildInfo {
        BuildInfo {
            version: version.to_string(),
            commit: commit.to_string(),
            dirty: dirty == "true",
            features: features
                .split(',')
                .filter(|f| !f.is_empty())
                .map(str::to_string)
                .collect(),
        }
    }

    /// The first 12 hex digits of the commit (or `unknown`).
    pub fn short_commit(&self) -> &str {
        &self.commit[..self.commit.len().min(12)]
    }
}

impl fmt::Display for BuildInfo {
    /// `0.1.0 (commit 1a2b3c4d5e6f, dirty; features: cuda, hf-hub)`; `features: none` without any.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (commit {}", self.version, self.short_commit())?;
        if self.dirty {
            f.write_str(", dirty")?;
        }
        match self.features.is_empty() {
            true => f.write_str("; features: none)"),
            false => write!(f, "; features: {})", self.features.join(", ")),
        }
    }
}

/// The [`BuildInfo`] of the calling crate, whose build script ran [`emit`].
#[macro_export]
macro_rules! build_info {
    () => {
        $crate::build_info::BuildInfo::from_parts(
            env!("CARGO_PKG_VERSION"),
            env!("SPARSETRAIN_BUILD_COMMIT"),
            env!("SPARSETRAIN_BUILD_DIRTY"),
            env!("SPARSETRAIN_BUILD_FEATURES"),
        )
    };
}

/// The `--version` text of the calling crate, whose build script ran [`emit`]: a `&'static str`.
#[macro_export]
macro_rules! version_line {
    () => {
        env!("SPARSETRAIN_BUILD_LINE")
    };
}

static RECORDED: OnceLock<BuildInfo> = OnceLock::new();

/// Records the running binary's build for the libraries it calls; the first record stays.
pub fn record(info: BuildInfo) {
    let _ = RECORDED.set(info);
}

/// What the binary [`record`]ed; `None` in a process that recorded nothing (a library's tests).
pub fn recorded() -> Option<&'static BuildInfo> {
    RECORDED.get()
}

/// For a build script: sets [`COMMIT_VAR`], [`DIRTY_VAR`], [`FEATURES_VAR`] and [`LINE_VAR`] for the crate being
/// built, from `git` and from the features cargo enabled (`CARGO_FEATURE_*`), and asks
/// cargo to rerun the script when the commit or any source file of the checkout changes.
pub fn emit() {
    let root = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let root = Path::new(&root);
    let commit = git(root, &["rev-parse", "HEAD"]);
    let dirty = commit.is_some()
        && git(root, &["status", "--porcelain", "--untracked-files=no"])
            .is_some_and(|s| !s.is_empty());
    let mut on: Vec<String> = std::env::vars()
        .filter_map(|(k, _)| Some(feature_name(k.strip_prefix("CARGO_FEATURE_")?)))
        .filter(|f| f != "default")
        .collect();
    on.sort_unstable();
    let commit = commit.unwrap_or_else(|| UNKNOWN_COMMIT.into());
    let features = on.join(",");
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let info = BuildInfo::from_parts(&version, &commit, &dirty.to_string(), &features);
    println!("cargo:rustc-env={COMMIT_VAR}={commit}");
    println!("cargo:rustc-env={DIRTY_VAR}={dirty}");
    println!("cargo:rustc-env={FEATURES_VAR}={features}");
    println!("cargo:rustc-env={LINE_VAR}={info}");
    // HEAD moves on a checkout, the branch's ref (or packed-refs) on a commit, the index on `git add`.
    for name in ["HEAD", "index", "packed-refs"] {
        if let Some(path) = git(root, &["rev-parse", "--git-path", name]) {
            println!("cargo:rerun-if-changed={}", root.join(path).display());
        }
    }
    if let Some(branch) = git(root, &["symbolic-ref", "-q", "HEAD"]) {
        if let Some(path) = git(root, &["rev-parse", "--git-path", &branch]) {
            println!("cargo:rerun-if-changed={}", root.join(path).display());
        }
    }
    // An edit anywhere in the tracked sources changes the dirty flag.
    if let Some(files) = git(root, &["ls-files"]) {
        let mut tops: Vec<&str> = files.lines().filter_map(|f| f.split('/').next()).collect();
        tops.dedup();
        for top in tops {
            println!("cargo:rerun-if-changed={}", root.join(top).display());
        }
    }
}

/// A feature's name from cargo's `CARGO_FEATURE_<NAME>` spelling (upper case, `-` as `_`); the
/// workspace names features in lower case with `-`.
fn feature_name(var_suffix: &str) -> String {
    var_suffix.to_lowercase().replace('_', "-")
}

/// The trimmed output of a successful `git ARGS` in `dir`.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_version_commit_and_features() {
        let info = BuildInfo::from_parts("0.1.0", "0123456789abcdef0123", "true", "cuda,hf-hub");
        assert_eq!(
            info.to_string(),
            "0.1.0 (commit 0123456789ab, dirty; features: cuda, hf-hub)"
        );
        let bare = BuildInfo::from_parts("0.1.0", UNKNOWN_COMMIT, "false", "");
        assert!(bare.features.is_empty() && !bare.dirty);
        assert_eq!(bare.to_string(), "0.1.0 (commit unknown; features: none)");
    }

    #[test]
    fn features_are_named_as_cargo_names_them() {
        assert_eq!(feature_name("HF_HUB"), "hf-hub");
        assert_eq!(feature_name("CUDA"), "cuda");
    }
}
