//! A run of several ranks through the one launcher. Rank 0 owns the run directory: its lock, run.json,
//! the config, the metrics, the checkpoints' folders and the report. The other ranks follow: they learn
//! the directory and the resume point from rank 0, write only their own parts of a checkpoint into the
//! folder rank 0 prepares (a shared file system, where a rank writes any), and stop at the step every
//! other rank stops at. Every agreement here is a collective call that all ranks make at the same
//! point of the loop, so a rank that fails says so to the others instead of leaving them waiting.

use crate::error::{Error, Result};
use crate::run_dir::{Checkpoint, Progress};
use collective::Collective;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The group a command's ranks run in, as the launcher and the loop see it.
#[derive(Clone)]
pub struct RankGroup {
    comm: Arc<dyn Collective>,
    /// Past this long without a completed step a rank ends itself ([`crate::watchdog`]).
    stall_timeout: Option<std::time::Duration>,
}

impl std::fmt::Debug for RankGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "rank {} of {}", self.rank(), self.world())
    }
}

/// What rank 0 tells the others once it has opened the run directory.
#[derive(Serialize, Deserialize)]
enum Opened {
    Run {
        dir: PathBuf,
        resume: Option<(PathBuf, Progress)>,
    },
    Failed(String),
}

impl RankGroup {
    pub fn new(comm: Arc<dyn Collective>) -> RankGroup {
        RankGroup {
            comm,
            stall_timeout: None,
        }
    }

    /// Ends this rank (exit status 1, naming it) when no step completes within `timeout`: a rank
    /// that died or hangs otherwise leaves the others waiting on the GPU for ever.
    pub fn with_stall_timeout(mut self, timeout: std::time::Duration) -> RankGroup {
        self.stall_timeout = Some(timeout);
        self
    }

    /// The watchdog of a group with a stall timeout, started now.
    pub(crate) fn watchdog(&self) -> Option<crate::watchdog::Watchdog> {
        let timeout = self.stall_timeout.filter(|_| self.world() > 1)?;
        Some(crate::watchdog::Watchdog::start(
            self.rank(),
            self.world(),
            timeout,
            crate::watchdog::exit_on_stall(),
        ))
    }

    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    pub fn world(&self) -> usize {
        self.comm.world()
    }

    /// Rank 0 writes the run's files; the others follow it.
    pub fn leads(&self) -> bool {
        self.rank() == 0
    }

    pub fn comm(&self) -> &dyn Collective {
        self.comm.as_ref()
    }

    /// The collective itself, for a trainer's own calls.
    pub fn shared(&self) -> Arc<dyn Collective> {
        Arc::clone(&self.comm)
    }

    fn call<T>(&self, what: &str, r: collective::Result<T>) -> Result<T> {
        r.map_err(|e| {
            Error::Ranks(format!(
                "rank {} of {}, {what}: {e}",
                self.rank(),
                self.world()
            ))
        })
    }

    /// Rank 0's run directory and resume point, on every rank: rank 0 passes what it opened (or why it
    /// could not), the others pass `None` and receive it.
    pub(crate) fn share_opening(
        &self,
        opened: Option<&Result<(PathBuf, Option<Checkpoint>)>>,
    ) -> Result<(PathBuf, Option<Checkpoint>)> {
        let mut bytes = match opened {
            Some(result) => {
                let message = match result {
                    Ok((dir, resume)) => Opened::Run {
                        dir: dir.clone(),
                        resume: resume.as_ref().map(|c| (c.dir.clone(), c.progress)),
                    },
                    Err(e) => Opened::Failed(e.to_string()),
                };
                serde_json::to_vec(&message).map_err(|source| Error::Json {
                    what: "the opened run directory".into(),
                    source,
                })?
            }
            None => Vec::new(),
        };
        self.call(
            "receiving the run directory from rank 0",
            self.comm.broadcast_bytes(0, &mut bytes),
        )?;
        let message: Opened = serde_json::from_slice(&bytes).map_err(|source| Error::Json {
            what: "the run directory rank 0 sent".into(),
            source,
        })?;
        match message {
            Opened::Run { dir, resume } => Ok((
                dir,
                resume.map(|(dir, progress)| Checkpoint { dir, progress }),
            )),
            Opened::Failed(why) => Err(Error::Ranks(format!(
                "rank 0 could not open the run directory: {why}"
            ))),
        }
    }

    /// Whether any rank asked to stop after this step (a signal reaches the ranks at different steps).
    pub(crate) fn any_stop(&self, mine: bool) -> Result<bool> {
        let mut flag = [u64::from(mine)];
        self.call(
            "agreeing whether to stop",
            self.comm.all_reduce_sum_u64(&mut flag),
        )?;
        Ok(flag[0] > 0)
    }

    /// Rank 0's `path` on every rank (the others pass anything).
    pub(crate) fn share_path(&self, path: &Path) -> Result<PathBuf> {
        let mut bytes = path.as_os_str().as_encoded_bytes().to_vec();
        self.call(
            "receiving the checkpoint folder from rank 0",
            self.comm.broadcast_bytes(0, &mut bytes),
        )?;
        // SAFETY: the bytes are those of an OsStr on rank 0, a process of this same binary.
        let os = unsafe { std::ffi::OsString::from_encoded_bytes_unchecked(bytes) };
        Ok(PathBuf::from(os))
    }

    /// Every rank's outcome of a part all of them did (`what`), so that all go on or all fail: the
    /// error names each rank that failed and why.
    pub(crate) fn all_succeeded(&self, what: &str, mine: &Result<(), String>) -> Result<()> {
        let report = match mine {
            Ok(()) => Vec::new(),
            Err(why) => why.clone().into_bytes(),
        };
        let all = self.call(what, self.comm.all_gather_bytes(&report))?;
        let failed: Vec<String> = all
            .iter()
            .enumerate()
            .filter(|(_, why)| !why.is_empty())
            .map(|(rank, why)| format!("rank {rank}: {}", String::from_utf8_lossy(why)))
            .collect();
        if failed.is_empty() {
            return Ok(());
        }
        Err(Error::Ranks(format!(
            "{what} failed on {}",
            failed.join("; ")
        )))
    }
}
