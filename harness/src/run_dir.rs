//! The run directory: one folder per training run holding everything it produced.
//!
//! ```text
//! <run>/run.json          who the run is: name, config name, selector, creation time, and where and
//!                         with what it ran (host, CPU, GPUs, driver, commit, features, model hash)
//! <run>/config.toml       the config file as given
//! <run>/config.json       the config after defaults were resolved
//! <run>/metrics.jsonl     one JSON record per logged step or eval
//! <run>/checkpoints/step-00001000/    one folder per checkpoint (written whole, then renamed)
//! <run>/checkpoints/latest            name of the newest complete checkpoint folder
//! <run>/report.html       the plotted report
//! ```

use crate::atomic::{sync_dir, write_atomic, write_json_atomic};
use crate::error::{Error, Result};
use crate::provenance::Provenance;
use serde::{Deserialize, Serialize};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

pub const RUN_META_FILE: &str = "run.json";
pub const CONFIG_TOML_FILE: &str = "config.toml";
pub const CONFIG_JSON_FILE: &str = "config.json";
pub const METRICS_FILE: &str = "metrics.jsonl";
pub const CHECKPOINTS_DIR: &str = "checkpoints";
pub const LATEST_CHECKPOINT_FILE: &str = "latest";
/// Written by the training loop into every checkpoint folder; trainers must not use this name.
pub const PROGRESS_FILE: &str = "progress.json";
pub const REPORT_FILE: &str = "report.html";
/// The files a run writes at the top of its directory.
pub const RUN_FILES: [&str; 5] = [
    RUN_META_FILE,
    CONFIG_TOML_FILE,
    CONFIG_JSON_FILE,
    METRICS_FILE,
    REPORT_FILE,
];

/// Identity of a run, used by reports (labels, grouping) and by Weights & Biases (group, tags).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunMeta {
    /// Run name, by default the directory name.
    pub name: String,
    /// Name of the config the run was started from (file stem), e.g. "tiny": the W&B group.
    #[serde(default)]
    pub config_name: String,
    /// Selector kind ("profk", "sort", "radix"): the W&B tag that tells runs of one config apart.
    #[serde(default)]
    pub selector: String,
    /// What kind of training ("sae", "finetune", ...).
    #[serde(default)]
    pub task: String,
    /// Creation time, UTC, `YYYY-MM-DDTHH:MM:SSZ`.
    #[serde(default)]
    pub created_utc: String,
    /// Free-form facts shown in the report table (device, model, dictionary size...).
    #[serde(default)]
    pub details: serde_json::Map<String, serde_json::Value>,
    /// Where and with what the run ran (host, CPU, GPUs and driver, build, model weights); absent in
    /// runs recorded before it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
    /// The provenance of earlier segments of a resumed run, where it differed from the latest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier_provenance: Vec<Provenance>,
}

/// Where the training loop stood when a checkpoint was written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Completed optimizer steps.
    pub step: u64,
    /// Training tokens consumed so far.
    pub tokens: u64,
    /// Training wall time so far, seconds, summed over resumed segments.
    pub wall_s: f64,
}

/// A complete checkpoint found on disk.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    pub dir: PathBuf,
    pub progress: Progress,
}

/// Handle on a run directory; it only holds paths, so it is cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDir {
    path: PathBuf,
}

impl RunDir {
    /// Creates `<root>/<name>-<YYYYmmdd-HHMMSS>` (with `-2`, `-3`... if that exists), e.g.
    /// `runs/tiny-profk-20261130-013000`.
    pub fn create(root: &Path, name: &str) -> Result<RunDir> {
        fs::create_dir_all(root).map_err(Error::io("creating directory", root))?;
        let base = format!("{name}-{}", compact_timestamp(SystemTime::now()));
        for attempt in 1.. {
            let candidate = if attempt == 1 {
                root.join(&base)
            } else {
                root.join(format!("{base}-{attempt}"))
            };
            match fs::create_dir(&candidate) {
                Ok(()) => return Self::init(candidate),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(Error::io("creating directory", &candidate)(e)),
            }
        }
        unreachable!("the attempt counter is unbounded")
    }

    /// Uses exactly `path` (an explicit `--out DIR`). It may exist, but must not already hold a run:
    /// continuing one is `--resume`.
    pub fn create_at(path: &Path) -> Result<RunDir> {
        if path.join(METRICS_FILE).exists() || path.join(RUN_META_FILE).exists() {
            return Err(Error::RunDir {
                path: path.to_path_buf(),
                message:
                    "already holds a run; pass --resume to continue it or choose another --out"
                        .into(),
            });
        }
        fs::create_dir_all(path).map_err(Error::io("creating directory", path))?;
        Self::init(path.to_path_buf())
    }

    /// Opens the directory of an earlier run (for `--resume` and reports).
    pub fn open_existing(path: &Path) -> Result<RunDir> {
        if !path.is_dir() {
            return Err(Error::RunDir {
                path: path.to_path_buf(),
                message: "no such run directory".into(),
            });
        }
        if !path.join(METRICS_FILE).exists() && !path.join(RUN_META_FILE).exists() {
            return Err(Error::RunDir {
                path: path.to_path_buf(),
                message: format!(
                    "not a run directory (neither {RUN_META_FILE} nor {METRICS_FILE})"
                ),
            });
        }
        Ok(RunDir {
            path: path.to_path_buf(),
        })
    }

    /// The directory rank 0 of a group opened, as the other ranks name it: they write only their
    /// parts of the checkpoints there.
    pub(crate) fn opened_by_rank0(path: &Path) -> RunDir {
        RunDir {
            path: path.to_path_buf(),
        }
    }

    fn init(path: PathBuf) -> Result<RunDir> {
        let checkpoints = path.join(CHECKPOINTS_DIR);
        fs::create_dir_all(&checkpoints).map_err(Error::io("creating directory", &checkpoints))?;
        Ok(RunDir { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
    /// The directory name, the default run name.
    pub fn name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.path.display().to_string())
    }
    pub fn metrics_path(&self) -> PathBuf {
        self.path.join(METRICS_FILE)
    }
    pub fn report_path(&self) -> PathBuf {
        self.path.join(REPORT_FILE)
    }
    pub fn checkpoints_dir(&self) -> PathBuf {
        self.path.join(CHECKPOINTS_DIR)
    }
    /// Folder of the checkpoint taken after `step` completed steps.
    pub fn checkpoint_dir(&self, step: u64) -> PathBuf {
        self.checkpoints_dir().join(format!("step-{step:08}"))
    }

    /// Saves the config as given (`toml_text`) and as resolved (`resolved`, any serializable value).
    pub fn write_config<C: Serialize + ?Sized>(&self, toml_text: &str, resolved: &C) -> Result<()> {
        write_atomic(&self.path.join(CONFIG_TOML_FILE), toml_text.as_bytes())?;
        write_json_atomic(&self.path.join(CONFIG_JSON_FILE), resolved)
    }

    /// Writes run.json; an empty `name` or `created_utc` is filled in.
    pub fn write_meta(&self, meta: &RunMeta) -> Result<()> {
        let mut meta = meta.clone();
        if meta.name.is_empty() {
            meta.name = self.name();
        }
        if meta.created_utc.is_empty() {
            meta.created_utc = runtime::host::iso_timestamp(SystemTime::now());
        }
        write_json_atomic(&self.path.join(RUN_META_FILE), &meta)
    }

    /// Reads run.json, or derives a minimal identity from the directory name when it is missing.
    pub fn read_meta(&self) -> Result<RunMeta> {
        let path = self.path.join(RUN_META_FILE);
        if !path.exists() {
            return Ok(RunMeta {
                name: self.name(),
                ..RunMeta::default()
            });
        }
        let text = fs::read_to_string(&path).map_err(Error::io("reading", &path))?;
        let mut meta: RunMeta = serde_json::from_str(&text).map_err(|e| Error::Parse {
            path: path.clone(),
            line: e.line(),
            message: e.to_string(),
        })?;
        if meta.name.is_empty() {
            meta.name = self.name();
        }
        Ok(meta)
    }

    /// Reads the resolved config (config.json), if saved.
    pub fn read_config_json(&self) -> Result<Option<serde_json::Value>> {
        let path = self.path.join(CONFIG_JSON_FILE);
        if !path.exists() {
            return Ok(None);
        }
        let text = fs::read_to_string(&path).map_err(Error::io("reading", &path))?;
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| Error::Parse {
                path,
                line: e.line(),
                message: e.to_string(),
            })
    }

    /// The newest complete checkpoint, following `checkpoints/latest`, or scanning the folders if that
    /// pointer is missing. Half-written checkpoints are temporary folders and never match.
    pub fn latest_checkpoint(&self) -> Result<Option<Checkpoint>> {
        let dir = self.checkpoints_dir();
        let pointer = dir.join(LATEST_CHECKPOINT_FILE);
        if let Ok(name) = fs::read_to_string(&pointer) {
            let candidate = dir.join(name.trim());
            if candidate.join(PROGRESS_FILE).exists() {
                return read_checkpoint(&candidate).map(Some);
            }
        }
        Ok(self.checkpoints()?.pop())
    }

    /// Every complete checkpoint, oldest first.
    pub fn checkpoints(&self) -> Result<Vec<Checkpoint>> {
        let dir = self.checkpoints_dir();
        if !dir.exists() {
            return Ok(Vec::new());
        }
        let mut found = Vec::new();
        for entry in fs::read_dir(&dir).map_err(Error::io("listing", &dir))? {
            let entry = entry.map_err(Error::io("listing", &dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("step-") && entry.path().join(PROGRESS_FILE).exists() {
                found.push(read_checkpoint(&entry.path())?);
            }
        }
        found.sort_by_key(|c| c.progress.step);
        Ok(found)
    }

    /// Points `checkpoints/latest` at `dir` (a folder inside checkpoints/).
    pub(crate) fn set_latest_checkpoint(&self, dir: &Path) -> Result<()> {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        write_atomic(
            &self.checkpoints_dir().join(LATEST_CHECKPOINT_FILE),
            format!("{name}\n").as_bytes(),
        )?;
        sync_dir(&self.checkpoints_dir())
    }
}

fn read_checkpoint(dir: &Path) -> Result<Checkpoint> {
    let path = dir.join(PROGRESS_FILE);
    let text = fs::read_to_string(&path).map_err(Error::io("reading", &path))?;
    let progress = serde_json::from_str(&text).map_err(|e| Error::Parse {
        path: path.clone(),
        line: e.line(),
        message: e.to_string(),
    })?;
    Ok(Checkpoint {
        dir: dir.to_path_buf(),
        progress,
    })
}

/// `YYYYmmdd-HHMMSS` in UTC, for directory names.
pub fn compact_timestamp(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s) = runtime::host::utc_fields(t);
    format!("{y:04}{mo:02}{d:02}-{h:02}{mi:02}{s:02}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn timestamps_match_known_dates() {
        let t = UNIX_EPOCH + Duration::from_secs(1_796_002_200); // 2026-11-30T01:30:00Z
        assert_eq!(compact_timestamp(t), "20261130-013000");
    }
}
