//! Shards whose sha256 this process has already checked: a shard is hashed before its rows are first
//! used, not again on every epoch. A file is known by its path, size and modification time, so a shard
//! rewritten during the run is checked again.
use crate::error::{Error, Result};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::SystemTime;

#[derive(Hash, PartialEq, Eq)]
struct Stamp {
    path: PathBuf,
    len: u64,
    modified: Option<SystemTime>,
    sha256: String,
}

fn seen() -> &'static Mutex<HashSet<Stamp>> {
    static SEEN: OnceLock<Mutex<HashSet<Stamp>>> = OnceLock::new();
    SEEN.get_or_init(Default::default)
}

fn stamp(path: &Path, sha256: &str) -> Result<Stamp> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    Ok(Stamp {
        path: std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
        len: meta.len(),
        modified: meta.modified().ok(),
        sha256: sha256.to_string(),
    })
}

/// Checks that `bytes`, just read from `path`, hash to `expected` (the manifest's sha256), unless this
/// process has checked the same file before. Returns whether it hashed them.
pub(crate) fn check(path: &Path, bytes: &[u8], expected: &str) -> Result<bool> {
    let stamp = stamp(path, expected)?;
    let known = seen()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&stamp);
    if known && stamp.len == bytes.len() as u64 {
        return Ok(false);
    }
    let sha = super::shard_file::sha256_hex(bytes);
    if sha != expected {
        return Err(Error::shard(
            path,
            format!(
                "sha256 {sha} differs from the manifest's {expected}: the file is corrupt or was replaced"
            ),
        ));
    }
    seen()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(stamp);
    Ok(true)
}
