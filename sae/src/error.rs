use std::path::PathBuf;
use thiserror::Error;

/// Every failure of SAE training, with the context a user needs to find the cause.
#[derive(Debug, Error)]
pub enum Error {
    /// A configuration value is invalid; `key` is its dotted TOML path.
    #[error("config key `{key}`: {msg}")]
    Config { key: String, msg: String },
    #[error("cannot parse config {path}: {msg}")]
    ConfigParse { path: PathBuf, msg: String },
    /// The cause is part of the message (not a separate source), so a chain of errors prints it once.
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(transparent)]
    Write(#[from] runtime::fs::Error),
    #[error("checkpoint {path}: {msg}")]
    Checkpoint { path: PathBuf, msg: String },
    #[error("data: {0}")]
    Data(String),
    #[error("step {step}: selector {a} and selector {b} chose different elements ({differ} of {k} differ)")]
    SelectionMismatch {
        step: u64,
        a: String,
        b: String,
        differ: usize,
        k: usize,
    },
    #[error("step {step}: non-finite {what}")]
    NonFinite { step: u64, what: String },
    #[error("shape: {0}")]
    Shape(String),
    #[error(transparent)]
    Select(#[from] profk::Error),
    #[error(transparent)]
    Activations(#[from] activations::Error),
    #[error(transparent)]
    Model(#[from] gpt2::Error),

    /// Boxed: the family loaders' error is large.
    #[error(transparent)]
    Models(Box<models::Error>),
    #[error(transparent)]
    Run(#[from] harness::Error),
    #[error(transparent)]
    Runtime(#[from] runtime::Error),
    #[error(transparent)]
    Eval(#[from] eval::Error),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    /// A collective across the ranks failed (the message names the rank at fault).
    #[error("distributed: {0}")]
    Collective(#[from] collective::Error),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn config(key: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Config {
            key: key.into(),
            msg: msg.into(),
        }
    }
    pub fn io(path: impl Into<PathBuf>, error: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            error,
        }
    }
}

impl From<models::Error> for Error {
    fn from(e: models::Error) -> Self {
        Error::Models(Box::new(e))
    }
}
