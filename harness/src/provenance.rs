//! Where and with what a run ran: the host, its CPU and GPUs with the driver, the build of the binary
//! (version, git commit, features) and the model's weights. Recorded in run.json, so a report can warn
//! when the runs it compares ran under different conditions.

use serde::{Deserialize, Serialize};
use std::{fmt, path::Path};

/// What is recorded where a fact could not be read.
use runtime::host::{host_name, UNKNOWN};
/// The GPU and driver of a machine without an NVIDIA driver.
pub const NONE: &str = "none";

/// The build of a binary: its version, the git commit it was built from and its cargo features.
///
/// The root package fills it in at build time (`sparsetrain::build_info()`), so a binary run outside
/// the checkout still knows its commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildInfo {
    pub version: String,
    /// Full commit hash, or "unknown" for a build outside a git checkout.
    pub commit: String,
    /// The sources the binary was built from differ from the commit.
    pub dirty: bool,
    /// Enabled cargo features of the root package (`cuda`, `hf-hub`, `bench`).
    pub features: Vec<String>,
}

impl Default for BuildInfo {
    /// A build that did not say what it is (a library caller that passed nothing).
    fn default() -> Self {
        BuildInfo {
            version: UNKNOWN.into(),
            commit: UNKNOWN.into(),
            dirty: false,
            features: Vec::new(),
        }
    }
}

impl BuildInfo {
    /// The commit as people read it: 12 hex digits, `+dirty` when the sources had changes.
    pub fn short_commit(&self) -> String {
        let short: String = self.commit.chars().take(12).collect();
        if self.dirty {
            format!("{short}+dirty")
        } else {
            short
        }
    }

    /// The features joined by ", ", or "none".
    pub fn feature_list(&self) -> String {
        if self.features.is_empty() {
            NONE.into()
        } else {
            self.features.join(", ")
        }
    }
}

impl fmt::Display for BuildInfo {
    /// `0.1.0 (commit 0107786a1b2c+dirty, features: cuda, hf-hub)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (commit {}, features: {})",
            self.version,
            self.short_commit(),
            self.feature_list()
        )
    }
}

/// The conditions of one run (or one resumed segment of it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    pub host: String,
    pub cpu: String,
    /// One entry per GPU the driver lists (empty without an NVIDIA driver).
    pub gpus: Vec<String>,
    /// The NVIDIA driver version, or "none".
    pub gpu_driver: String,
    pub build: BuildInfo,
    /// `sha256:<hex>` of the model weights the run read, a description of weights that have no file
    /// (random initializations), or `None` for a run without a model (synthetic data).
    pub model_sha256: Option<String>,
}

impl Provenance {
    /// This machine's facts, with the build and model the caller names.
    pub fn current(build: BuildInfo, model_sha256: Option<String>) -> Provenance {
        let (gpus, gpu_driver) = nvidia_gpus();
        Provenance {
            host: host_name(),
            cpu: cpu_model(),
            gpus,
            gpu_driver,
            build,
            model_sha256,
        }
    }

    /// The facts two runs differ in, by name (`host`, `cpu`, `gpus`, `gpu_driver`, `commit`,
    /// `features`, `model`), each with both values.
    pub fn differences(&self, other: &Provenance) -> Vec<(&'static str, String, String)> {
        let gpus = |p: &Provenance| {
            if p.gpus.is_empty() {
                NONE.to_string()
            } else {
                p.gpus.join(", ")
            }
        };
        let model = |p: &Provenance| p.model_sha256.clone().unwrap_or_else(|| NONE.into());
        let facts: [(&'static str, Fact); 7] = [
            ("host", |p| p.host.clone()),
            ("cpu", |p| p.cpu.clone()),
            ("gpus", gpus),
            ("gpu_driver", |p| p.gpu_driver.clone()),
            ("commit", |p| p.build.short_commit()),
            ("features", |p| p.build.feature_list()),
            ("model", model),
        ];
        facts
            .into_iter()
            .filter_map(|(name, get)| {
                let (a, b) = (get(self), get(other));
                (a != b).then_some((name, a, b))
            })
            .collect()
    }
}

/// How one fact is read from a [`Provenance`], for comparisons.
type Fact = fn(&Provenance) -> String;

/// The CPU's model name (Linux: the first `model name` of /proc/cpuinfo).
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| field_of(&text, "model name"))
        .unwrap_or_else(|| UNKNOWN.into())
}

/// The NVIDIA GPUs and driver version: from /proc/driver/nvidia when present, else from
/// `nvidia-smi`; `([], "none")` where neither answers.
pub fn nvidia_gpus() -> (Vec<String>, String) {
    let proc_dir = Path::new("/proc/driver/nvidia");
    if proc_dir.is_dir() {
        let driver = read_trimmed(proc_dir.join("version"))
            .and_then(|text| driver_of_proc_version(&text))
            .unwrap_or_else(|| UNKNOWN.into());
        let mut infos: Vec<_> = std::fs::read_dir(proc_dir.join("gpus"))
            .map(|dir| dir.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        infos.sort();
        let gpus: Vec<String> = infos
            .iter()
            .filter_map(|p| read_trimmed(p.join("information")))
            .filter_map(|text| field_of(&text, "Model"))
            .collect();
        if !gpus.is_empty() {
            return (gpus, driver);
        }
    }
    // Looked up first: a process started in vain still copies this one's open files (a run's lock)
    // until it fails.
    let Some(smi) = in_path("nvidia-smi") else {
        return (Vec::new(), NONE.into());
    };
    let smi = std::process::Command::new(smi)
        .args(["--query-gpu=name,driver_version", "--format=csv,noheader"])
        .output();
    match smi {
        Ok(out) if out.status.success() => parse_nvidia_smi(&String::from_utf8_lossy(&out.stdout)),
        _ => (Vec::new(), NONE.into()),
    }
}

/// The executable `name` in a directory of `PATH`.
fn in_path(name: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// `name, driver` lines of `nvidia-smi --query-gpu=name,driver_version --format=csv,noheader`.
fn parse_nvidia_smi(text: &str) -> (Vec<String>, String) {
    let rows: Vec<(&str, &str)> = text
        .lines()
        .filter_map(|l| l.rsplit_once(','))
        .map(|(name, driver)| (name.trim(), driver.trim()))
        .filter(|(name, _)| !name.is_empty())
        .collect();
    match rows.first() {
        None => (Vec::new(), NONE.into()),
        Some((_, driver)) => (
            rows.iter().map(|(name, _)| name.to_string()).collect(),
            driver.to_string(),
        ),
    }
}

/// The version in `NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar ...`: the first
/// word after "Kernel Module" (or after "NVRM version:" for other layouts) that starts with a digit.
fn driver_of_proc_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    let rest = line
        .split_once("Kernel Module")
        .map_or(line, |(_, after)| after);
    rest.split_whitespace()
        .find(|w| w.starts_with(|c: char| c.is_ascii_digit()) && w.contains('.'))
        .map(str::to_string)
}

/// The value of the first `key : value` line of `text`.
fn field_of(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == key)
            .then(|| v.trim().to_string())
            .filter(|v| !v.is_empty())
    })
}

fn read_trimmed(path: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_and_gpu_names_are_parsed_from_both_sources() {
        let version = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n\
                       GCC version:  gcc version 12.2.0";
        assert_eq!(
            driver_of_proc_version(version).as_deref(),
            Some("550.54.15")
        );
        // As an H100 host's open kernel module prints it, and its GPU's information file.
        let open = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release \
                    Build  (nixbld@)  \nGCC version:  gcc version 15.3.0 (GCC) ";
        assert_eq!(driver_of_proc_version(open).as_deref(), Some("580.159.04"));
        let info = "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 41\nGPU UUID: \t GPU-70bd2e5a\n";
        assert_eq!(
            field_of(info, "Model").as_deref(),
            Some("NVIDIA H100 80GB HBM3")
        );
        let smi = "NVIDIA H100 80GB HBM3, 550.54.15\nNVIDIA H100 80GB HBM3, 550.54.15\n";
        assert_eq!(
            parse_nvidia_smi(smi),
            (
                vec!["NVIDIA H100 80GB HBM3".to_string(); 2],
                "550.54.15".to_string()
            )
        );
        assert_eq!(parse_nvidia_smi(""), (Vec::new(), NONE.to_string()));
    }

    #[test]
    fn differences_name_each_fact() {
        let a = Provenance {
            host: "a".into(),
            cpu: "x".into(),
            gpus: vec![],
            gpu_driver: NONE.into(),
            build: BuildInfo {
                version: "0.1.0".into(),
                commit: "0123456789abcdef".into(),
                dirty: false,
                features: vec![],
            },
            model_sha256: Some("sha256:aa".into()),
        };
        assert!(a.differences(&a).is_empty());
        let mut b = a.clone();
        b.host = "b".into();
        b.build.dirty = true;
        b.model_sha256 = Some("sha256:bb".into());
        let names: Vec<&str> = a.differences(&b).iter().map(|d| d.0).collect();
        assert_eq!(names, ["host", "commit", "model"]);
        assert_eq!(b.build.short_commit(), "0123456789ab+dirty");
        assert_eq!(
            a.build.to_string(),
            "0.1.0 (commit 0123456789ab, features: none)"
        );
    }
}
