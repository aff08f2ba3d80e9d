//! Where a command may write: never over one of its own inputs, and only to a regular file.
//!
//! Every writer of a user-named output asks [`check_output_path`] first and writes to the path it returns.

use crate::error::{Error, Result};
use std::fs;
use std::path::{Path, PathBuf};

/// Checks that `output` may be (re)written and returns the file to write: `output` itself, or the regular
/// file a symlink at `output` points to (so that an atomic rename replaces the target, not the link).
///
/// Refused, with an error naming the path: a directory, fifo, socket or device node at `output`; a symlink
/// to anything but a regular file (a dangling one included); an `output` that is one of `inputs` (the same
/// canonical path, or the same file through a hard link: same device and inode); an `output` whose folder
/// does not exist.
pub fn check_output_path(output: &Path, inputs: &[&Path]) -> Result<PathBuf> {
    let refuse = |message: String| Error::Output {
        path: output.to_path_buf(),
        message,
    };
    if output.file_name().is_none() {
        return Err(refuse("names no file".into()));
    }
    let target = match fs::symlink_metadata(output) {
        Ok(meta) if meta.file_type().is_symlink() => {
            let target = fs::canonicalize(output).map_err(|e| {
                refuse(format!(
                    "is a symlink whose target cannot be resolved ({e})"
                ))
            })?;
            let kind = fs::metadata(&target).map(|m| kind_of(&m)).unwrap_or("?");
            if kind != "regular file" {
                return Err(refuse(format!(
                    "is a symlink to {} ({kind}); outputs are regular files",
                    target.display()
                )));
            }
            target
        }
        Ok(meta) if meta.is_file() => output.to_path_buf(),
        Ok(meta) => {
            return Err(refuse(format!(
                "is a {}; outputs are regular files",
                kind_of(&meta)
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let parent = match output.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            if !parent.is_dir() {
                return Err(refuse(format!(
                    "its folder {} does not exist",
                    parent.display()
                )));
            }
            return Ok(output.to_path_buf());
        }
        Err(e) => return Err(refuse(format!("cannot be inspected ({e})"))),
    };
    for input in inputs {
        if same_file(&target, input) {
            return Err(refuse(format!(
                "is also an input ({}); writing it would destroy what is being read; choose another output",
                input.display()
            )));
        }
    }
    Ok(target)
}

/// Checks that `dir` may become an output folder whose files are named `written` (a run directory and
/// what it writes): `dir` is a directory or does not exist yet, and none of `written` inside it is one
/// of `inputs` (say, the config file a run in its own folder would replace with its resolved copy).
pub fn check_output_dir(dir: &Path, written: &[&str], inputs: &[&Path]) -> Result<()> {
    let refuse = |message: String| Error::Output {
        path: dir.to_path_buf(),
        message,
    };
    match fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(meta) => {
            return Err(refuse(format!(
                "is a {}; --out names a directory",
                kind_of(&meta)
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(refuse(format!("cannot be inspected ({e})"))),
    }
    for name in written {
        let file = dir.join(name);
        if let Some(input) = inputs.iter().find(|input| same_file(&file, input)) {
            return Err(refuse(format!(
                "holds {}, an input of this command, which the run would overwrite with its own {name}; \
                 choose another --out",
                input.display()
            )));
        }
    }
    Ok(())
}

/// Whether two existing paths are the same file: the same canonical path or the same (device, inode).
fn same_file(a: &Path, b: &Path) -> bool {
    if let (Ok(ca), Ok(cb)) = (fs::canonicalize(a), fs::canonicalize(b)) {
        if ca == cb {
            return true;
        }
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if let (Ok(ma), Ok(mb)) = (fs::metadata(a), fs::metadata(b)) {
            return ma.dev() == mb.dev() && ma.ino() == mb.ino();
        }
    }
    false
}

/// What a non-regular path is, in words.
fn kind_of(meta: &fs::Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_file() {
        return "regular file";
    }
    if t.is_dir() {
        return "directory";
    }
    if t.is_symlink() {
        return "symlink";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "fifo";
        }
        if t.is_socket() {
            return "socket";
        }
        if t.is_block_device() || t.is_char_device() {
            return "device node";
        }
    }
    "special file"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_inputs_links_and_special_files() {
        let tmp = tempfile::tempdir().unwrap();
        let input = tmp.path().join("in.safetensors");
        fs::write(&input, b"x").unwrap();
        let fresh = tmp.path().join("out.safetensors");
        assert_eq!(check_output_path(&fresh, &[&input]).unwrap(), fresh);
        let err = check_output_path(&input, &[&input])
            .unwrap_err()
            .to_string();
        assert!(err.contains("also an input"), "{err}");
        // The same file by another spelling, a hard link and a symlink.
        let dotted = tmp.path().join(".").join("in.safetensors");
        assert!(check_output_path(&dotted, &[&input]).is_err());
        let hard = tmp.path().join("hard");
        fs::hard_link(&input, &hard).unwrap();
        assert!(check_output_path(&hard, &[&input]).is_err());
        #[cfg(unix)]
        {
            let link = tmp.path().join("link");
            std::os::unix::fs::symlink(&input, &link).unwrap();
            assert!(check_output_path(&link, &[&input]).is_err());
            // A symlink to another regular file is followed.
            let other = tmp.path().join("other");
            fs::write(&other, b"y").unwrap();
            let to_other = tmp.path().join("to_other");
            std::os::unix::fs::symlink(&other, &to_other).unwrap();
            assert_eq!(
                check_output_path(&to_other, &[&input]).unwrap(),
                fs::canonicalize(&other).unwrap()
            );
            let dangling = tmp.path().join("dangling");
            std::os::unix::fs::symlink(tmp.path().join("nowhere"), &dangling).unwrap();
            assert!(check_output_path(&dangling, &[]).is_err());
            let err = check_output_path(Path::new("/dev/null"), &[])
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("/dev/null") && err.contains("device node"),
                "{err}"
            );
        }
        let err = check_output_path(tmp.path(), &[]).unwrap_err().to_string();
        assert!(err.contains("directory"), "{err}");
        let err = check_output_path(&tmp.path().join("no/such/dir/x"), &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not exist"), "{err}");
    }
}
