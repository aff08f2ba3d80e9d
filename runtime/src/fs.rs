//! Crash-safe file writes: a reader sees either the old file or the complete new one, never a torn one,
//! and a write that returned survives a power loss. Every writer of the workspace (shards, manifests,
//! checkpoints, models, selections, reports, metrics) goes through [`write_atomic_via`], the one place
//! that decides how a file is put into place.
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A failed file operation: what was being done and to which path.
#[derive(Debug, thiserror::Error)]
#[error("{action} {}: {source}", path.display())]
pub struct Error {
    pub action: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    fn at<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> Error + 'a {
        move |source| Error {
            action,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Writes `bytes` to `path` atomically.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic_with(path, |file| file.write_all(bytes))
}

/// Writes `path` atomically through `write`, which fills a fresh temporary file.
pub fn write_atomic_with(
    path: &Path,
    write: impl FnOnce(&mut File) -> io::Result<()>,
) -> Result<()> {
    write_atomic_via(path, |tmp| {
        let create = || OpenOptions::new().write(true).create_new(true).open(tmp);
        // Never through a link planted at the temporary name; a leftover of an earlier process with
        // the same id is replaced.
        let mut file = match create() {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                fs::remove_file(tmp)?;
                create()?
            }
            other => other?,
        };
        write(&mut file)
    })
}

/// Writes `path` atomically through `write`, which creates the temporary file it is given (for
/// serializers that only write to a path): the file is then fsynced, renamed over `path`, and the
/// directory fsynced so that the rename itself is durable. On failure the temporary file is removed
/// and `path` is untouched.
pub fn write_atomic_via<E>(
    path: &Path,
    write: impl FnOnce(&Path) -> std::result::Result<(), E>,
) -> Result<()>
where
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let tmp = temp_path(path);
    let result = (|| {
        write(&tmp).map_err(|e| Error::at("writing", &tmp)(io::Error::other(e)))?;
        File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(Error::at("syncing", &tmp))?;
        fs::rename(&tmp, path).map_err(Error::at("renaming into place", path))?;
        sync_parent(path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// A temporary sibling of `path`, unique within the process: `.NAME.PID.N.tmp` (`*.tmp` is git-ignored).
pub fn temp_path(path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{name}.{}.{n}.tmp", std::process::id()))
}

/// The file name that a temporary file named `name` was standing in for, if `name` is one: from
/// [`temp_path`] (`.NAME.PID.N.tmp`) or the older `NAME.PID.tmp`.
pub fn temp_target(name: &str) -> Option<&str> {
    let mut stem = name.strip_suffix(".tmp")?;
    for _ in 0..2 {
        match stem.rsplit_once('.') {
            Some((head, num)) if !num.is_empty() && num.bytes().all(|b| b.is_ascii_digit()) => {
                stem = head
            }
            _ => break,
        }
    }
    let stem = stem.strip_prefix('.').unwrap_or(stem);
    (!stem.is_empty()).then_some(stem)
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
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(Error::at("syncing directory", dir))?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_file_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.json");
        write_atomic(&path, b"old").unwrap();
        write_atomic(&path, b"new").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_failed_write_keeps_the_old_file_and_names_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.bin");
        write_atomic(&path, b"old").unwrap();
        let err = write_atomic_with(&path, |_| Err(io::Error::other("disk full"))).unwrap_err();
        assert!(
            err.to_string().contains("a.bin") && err.to_string().contains("disk full"),
            "{err}"
        );
        assert_eq!(fs::read(&path).unwrap(), b"old");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_missing_directory_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing").join("a.bin");
        let err = write_atomic(&path, b"x").unwrap_err();
        assert!(err.to_string().contains("missing"), "{err}");
    }

    #[test]
    fn temporaries_are_unique_and_recognized() {
        let p = Path::new("/d/shard-00001.safetensors");
        let (a, b) = (temp_path(p), temp_path(p));
        assert_ne!(a, b);
        for t in [&a, &b] {
            let name = t.file_name().unwrap().to_str().unwrap();
            assert_eq!(temp_target(name), Some("shard-00001.safetensors"));
        }
        assert_eq!(temp_target("manifest.json.999.tmp"), Some("manifest.json"));
        assert_eq!(temp_target("manifest.json"), None);
    }
}
