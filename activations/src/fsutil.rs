//! Atomic file writes: write a temporary sibling, flush it to disk, rename it over the target.
use crate::error::{Error, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The temporary name used while `path` is being written.
pub fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}.tmp", std::process::id()));
    path.with_file_name(name)
}

/// Writes `bytes` to `path` so that a reader sees either the old file or the whole new one.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = temp_path(path);
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()
    };
    write().map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}

/// [`atomic_write`] of the concatenation of `parts`, each also handed to `visit` (e.g. a hasher)
/// as it is written; nothing is concatenated in memory.
pub fn atomic_write_parts(
    path: &Path,
    parts: &[&[u8]],
    mut visit: impl FnMut(&[u8]),
) -> Result<()> {
    let tmp = temp_path(path);
    let mut write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        for part in parts {
            visit(part);
            f.write_all(part)?;
        }
        f.sync_all()
    };
    write().map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}

pub fn create_dir_all(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))
}
