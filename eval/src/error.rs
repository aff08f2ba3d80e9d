use std::path::PathBuf;

/// Errors of run directories, the metrics sink and reports. Every variant names the file it concerns.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cause is part of the message (not a separate source), so a chain of errors prints it once.
    #[error("{op} {path}: {error}")]
    Io {
        op: &'static str,
        path: PathBuf,
        error: std::io::Error,
    },
    /// A checkpoint written on another thread failed (the cause is part of the message).
    #[error("writing checkpoint {path}: {cause}")]
    CheckpointWrite {
        path: PathBuf,
        cause: crate::train_loop::ImageError,
    },
    /// A config the file's text or its types refuse; `line` 0 when no single line is at fault.
    #[error("{}: {message}", place(path, *line))]
    Parse {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("output {path}: {message}")]
    Output { path: PathBuf, message: String },
    #[error("{path}: {message}")]
    RunDir { path: PathBuf, message: String },
    #[error("metrics writer for {path} failed: {message}")]
    Sink { path: PathBuf, message: String },
    #[error("{path} is in use by {holder}; wait for it to finish or stop it first")]
    Locked { path: PathBuf, holder: String },
    #[error("signal handling: {0}")]
    Signal(String),
    #[error("config key `{key}`: {message}")]
    Config { key: String, message: String },
    /// A `--set section.key=value` override the config refused.
    #[error("--set {item}: {message}")]
    Override { item: String, message: String },
    #[error("report: {0}")]
    Report(String),
    #[error("serializing {what}: {source}")]
    Json {
        what: String,
        #[source]
        source: serde_json::Error,
    },
}

/// `file:line`, or `file` without a line.
fn place(path: &std::path::Path, line: usize) -> String {
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
