//! One process per directory: an advisory lock (`flock`) on `<dir>/.lock`, held for the whole run.
//!
//! The lock file records who holds it (pid, host, command line, since when), so a second process is
//! refused with a message naming the holder. The kernel releases the lock when its holder dies
//! (kill -9, a crash, a node reboot on a local disk), so a lock left by a dead process is taken over
//! by the next one; its record is then overwritten.

use crate::error::{Error, Result};
use crate::host::{host_name, iso_timestamp};
use fs4::fs_std::FileExt;
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Name of the lock file inside a locked directory.
pub const LOCK_FILE: &str = ".lock";

/// Who holds a lock, as written into the lock file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Holder {
    pub pid: u32,
    pub host: String,
    pub command: String,
    /// UTC, `YYYY-MM-DDTHH:MM:SSZ`.
    pub since: String,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pid {} on host {} since {} (`{}`)",
            self.pid, self.host, self.since, self.command
        )
    }
}

/// An exclusive lock on a directory; released when dropped (or when the process dies).
#[derive(Debug)]
pub struct DirLock {
    file: File,
    path: PathBuf,
}

impl DirLock {
    /// Locks `dir` (which must exist) for this process, or says who holds it.
    pub fn acquire(dir: &Path) -> Result<DirLock> {
        let path = dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(Error::io("opening the lock file", &path))?;
        let acquired = file
            .try_lock_exclusive()
            .map_err(Error::io("locking", &path))?;
        let previous = read_holder(&mut file);
        if !acquired {
            let holder = previous.map_or_else(
                || "another process (which has not recorded itself yet)".to_string(),
                |h| h.to_string(),
            );
            return Err(Error::Locked {
                path: dir.to_path_buf(),
                holder,
            });
        }
        if let Some(stale) = previous.filter(|h| h.pid != std::process::id()) {
            eprintln!(
                "note: {} was locked by {stale}, which is no longer running; taking it over",
                dir.display()
            );
        }
        let me = Holder {
            pid: std::process::id(),
            host: host_name(),
            command: command_line(),
            since: iso_timestamp(SystemTime::now()),
        };
        let mut text = serde_json::to_string(&me).unwrap_or_default();
        text.push('\n');
        file.set_len(0)
            .and_then(|_| file.seek(SeekFrom::Start(0)))
            .and_then(|_| file.write_all(text.as_bytes()))
            .and_then(|_| file.sync_data())
            .map_err(Error::io("writing the lock file", &path))?;
        Ok(DirLock { file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Still holding the lock: an empty record tells the next process nobody was cut short.
        let _ = self.file.set_len(0);
    }
}

/// Who holds (or last held) the lock of `dir`, as its lock file records.
pub fn holder_of(dir: &Path) -> Option<Holder> {
    let mut file = File::open(dir.join(LOCK_FILE)).ok()?;
    read_holder(&mut file)
}

fn read_holder(file: &mut File) -> Option<Holder> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.read_to_string(&mut text).ok()?;
    serde_json::from_str(text.trim()).ok()
}

/// The command line of this process, shell-quoted where needed.
pub fn command_line() -> String {
    std::env::args()
        .map(|a| shell_quote(&a))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `a b` → `'a b'`; plain words stay as they are.
pub fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_keeps_plain_words_and_quotes_the_rest() {
        assert_eq!(shell_quote("runs/tiny-1"), "runs/tiny-1");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn a_second_lock_in_one_process_is_refused_and_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let first = DirLock::acquire(dir.path()).unwrap();
        // flock locks belong to the open file description, so a second open conflicts even here.
        let err = DirLock::acquire(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        assert_eq!(holder_of(dir.path()).unwrap().pid, std::process::id());
        drop(first);
        assert!(holder_of(dir.path()).is_none());
        DirLock::acquire(dir.path()).unwrap();
    }
}
