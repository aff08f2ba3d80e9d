use std::path::PathBuf;

/// The error of a checkpoint written on another thread.
pub type ImageError = Box<dyn std::error::Error + Send + Sync>;

/// Errors of the run harness: run directories, the metrics sink, the loop, the report. Every variant
/// names the file, key or run it concerns.
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
    CheckpointWrite { path: PathBuf, cause: ImageError },
    /// A config the file's text or its types refuse; `line` 0 when no single line is at fault.
    #[error("{}: {message}", runtime::error::place(path, *line))]
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
    /// Loading the config, opening the device, locking the run directory, handling signals.
    #[error(transparent)]
    Runtime(#[from] runtime::Error),
    #[error("config key `{key}`: {message}")]
    Config { key: String, message: String },
    /// A run of several ranks: agreeing with the other ranks, or a part that failed on one of them.
    #[error("{0}")]
    Ranks(String),
    #[error("report: {0}")]
    Report(String),
    #[error("serializing {what}: {source}")]
    Json {
        what: String,
        #[source]
        source: serde_json::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn config(key: impl Into<String>, message: impl Into<String>) -> Error {
        Error::Config {
            key: key.into(),
            message: message.into(),
        }
    }

    pub fn io(op: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |error| Error::Io { op, path, error }
    }
}
