use std::path::PathBuf;

/// Errors of the pieces every command shares: reading a config, opening a device, locking a
/// directory, handling signals. Every variant names the file, key or override it concerns.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cause is part of the message (not a separate source), so a chain of errors prints it once.
    #[error("{op} {path}: {error}")]
    Io {
        op: &'static str,
        path: PathBuf,
        error: std::io::Error,
    },
    /// A config the file's text or its types refuse; `line` 0 when no single line is at fault.
    #[error("{}: {message}", place(path, *line))]
    Parse {
        path: PathBuf,
        line: usize,
        message: String,
    },
    /// A `--set section.key=value` override the config refused.
    #[error("--set {item}: {message}")]
    Override { item: String, message: String },
    #[error("config key `{key}`: {message}")]
    Config { key: String, message: String },
    #[error("{path} is in use by {holder}; wait for it to finish or stop it first")]
    Locked { path: PathBuf, holder: String },
    #[error("signal handling: {0}")]
    Signal(String),
}

/// `file:line`, or `file` without a line.
pub fn place(path: &std::path::Path, line: usize) -> String {
    match line {
        0 => path.display().to_string(),
        n => format!("{}:{n}", path.display()),
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn config(key: impl Into<String>, message: impl Into<String>) -> Error {
        Error::Config {
            key: key.into(),
            message: message.into(),
        }
    }

    pub(crate) fn io(
        op: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |error| Error::Io { op, path, error }
    }
}
