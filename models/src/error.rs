//! The crate's error type: every variant names what went wrong and where.
use std::path::PathBuf;

pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Candle(#[from] candle_core::Error),

    /// Locating files, GPT-2 itself and hook-point parsing and checks.
    #[error(transparent)]
    Gpt2(#[from] gpt2::Error),

    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{path}: invalid config: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },

    #[error("{path}: `{key}`: {message}")]
    Config {
        path: PathBuf,
        key: String,
        message: String,
    },

    #[error("{path}: model_type `{model_type}` is not supported; supported: {}", crate::SUPPORTED_MODEL_TYPES.join(", "))]
    UnsupportedFamily { path: PathBuf, model_type: String },

    #[error("model {path}: {message}")]
    Model { path: PathBuf, message: String },

    #[error("unknown model shape `{name}`; known: {}", known.join(", "))]
    UnknownShape { name: String, known: Vec<String> },
}

impl Error {
    pub fn config(path: impl Into<PathBuf>, key: &str, message: impl Into<String>) -> Self {
        Error::Config {
            path: path.into(),
            key: key.to_string(),
            message: message.into(),
        }
    }
}
