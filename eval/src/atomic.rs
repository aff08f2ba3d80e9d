//! Crash-safe file writes: a reader sees either the old file or the complete new one, never a torn one.

use crate::error::{Error, Result};
use crate::output_path::check_output_path;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Writes `bytes` to `path` through a temporary file in the same directory, fsyncs it, renames it over
/// `path` and fsyncs the directory so the rename itself survives a power loss. A symlink at `path` is
/// followed to its regular file; anything else that is not a regular file is refused
/// ([`check_output_path`]).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let path = &check_output_path(path, &[])?;
    let tmp = temp_path(path);
    let result = (|| {
        let mut file = File::create(&tmp).map_err(Error::io("creating", &tmp))?;
        file.write_all(bytes).map_err(Error::io("writing", &tmp))?;
        file.sync_all().map_err(Error::io("syncing", &tmp))?;
        fs::rename(&tmp, path).map_err(Error::io("renaming into place", path))?;
        sync_parent(path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Serializes `value` as pretty JSON and writes it atomically.
pub fn write_json_atomic<T: serde::Serialize + ?Sized>(path: &Path, value: &T) -> Result<()> {
    let mut text = serde_json::to_vec_pretty(value).map_err(|source| Error::Json {
        what: path.display().to_string(),
        source,
    })?;
    text.push(b'\n');
    write_atomic(path, &text)
}

/// The temporary sibling used while `path` is being written; `*.tmp` is git-ignored.
pub fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}

/// Fsyncs the directory holding `path`, making a rename or a new entry in it durable.
pub fn sync_parent(path: &Path) -> Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    sync_dir(parent)
}

/// Fsyncs a directory (a no-op where directories cannot be opened for syncing).
pub fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        let handle = File::open(dir).map_err(Error::io("opening directory", dir))?;
        handle
            .sync_all()
            .map_err(Error::io("syncing directory", dir))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}
