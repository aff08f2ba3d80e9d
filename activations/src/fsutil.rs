//! Atomic file writes: write a temporary sibling, flush it to disk, rename it over the target. A failure
//! (a full disk, say) removes the temporary and names the operation and the path.
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
    atomic_write_parts(path, &[bytes], |_| {})
}

/// [`atomic_write`] of the concatenation of `parts`, each also handed to `visit` (e.g. a hasher)
/// as it is written; nothing is concatenated in memory.
pub fn atomic_write_parts(
    path: &Path,
    parts: &[&[u8]],
    mut visit: impl FnMut(&[u8]),
) -> Result<()> {
    let tmp = temp_path(path);
    let written = (|| {
        let mut f = std::fs::File::create(&tmp).map_err(|e| Error::file("creating", &tmp, e))?;
        for part in parts {
            visit(part);
            f.write_all(part)
                .map_err(|e| Error::file("writing", &tmp, e))?;
        }
        f.sync_all().map_err(|e| Error::file("syncing", &tmp, e))?;
        std::fs::rename(&tmp, path).map_err(|e| Error::file("renaming into place", path, e))
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

pub fn create_dir_all(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::file("creating directory", dir, e))
}
