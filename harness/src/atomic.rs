//! Crash-safe file writes (the workspace's one implementation is `runtime::fs`): a reader sees either
//! the old file or the complete new one, never a torn one.

use crate::error::{Error, Result};
use crate::output_path::check_output_path;
use std::path::Path;

pub use runtime::fs::temp_path;

impl From<runtime::fs::Error> for Error {
    fn from(e: runtime::fs::Error) -> Self {
        Error::Io {
            op: e.action,
            path: e.path,
            error: e.source,
        }
    }
}

/// Writes `bytes` to `path` through a temporary file in the same directory, fsyncs it, renames it over
/// `path` and fsyncs the directory so the rename itself survives a power loss. A symlink at `path` is
/// followed to its regular file; anything else that is not a regular file is refused
/// ([`check_output_path`]).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let path = &check_output_path(path, &[])?;
    Ok(runtime::fs::write_atomic(path, bytes)?)
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

/// Fsyncs a directory, making a rename or a new entry in it durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    Ok(runtime::fs::sync_dir(dir)?)
}
