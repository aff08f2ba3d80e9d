//! File writes of the data pipeline, through the workspace's one atomic write (`runtime::fs`).
use crate::error::{Error, Result};
use std::io::Write;
use std::path::Path;

/// Writes `bytes` to `path` so that a reader sees either the old file or the whole new one.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<()> {
    Ok(runtime::fs::write_atomic(path, bytes)?)
}

/// [`atomic_write`] of the concatenation of `parts`, each also handed to `visit` (e.g. a hasher)
/// as it is written; nothing is concatenated in memory.
pub fn atomic_write_parts(
    path: &Path,
    parts: &[&[u8]],
    mut visit: impl FnMut(&[u8]),
) -> Result<()> {
    Ok(runtime::fs::write_atomic_with(path, |f| {
        for part in parts {
            visit(part);
            f.write_all(part)?;
        }
        Ok(())
    })?)
}

pub fn create_dir_all(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::file("creating directory", dir, e))
}
