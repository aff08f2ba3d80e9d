//! The crate's one error type: every variant names what went wrong and where.
use std::path::PathBuf;

pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Candle(#[from] candle_core::Error),

    /// The cause is part of the message (not a separate source), so a chain of errors prints it once.
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },

    #[error("{op} {path}: {error}")]
    File {
        op: &'static str,
        path: PathBuf,
        error: std::io::Error,
    },

    #[error(transparent)]
    Write(#[from] runtime::fs::Error),

    #[error(transparent)]
    Gpt2(#[from] gpt2::Error),

    /// Boxed: the family loaders' error is large.
    #[error(transparent)]
    Models(Box<models::Error>),

    #[error("{path}: invalid JSON: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },

    /// Loading the config, opening the device, locking the output, handling signals.
    #[error(transparent)]
    Runtime(#[from] runtime::Error),

    #[error("config: `{key}`: {message}")]
    Config { key: String, message: String },

    #[error("model {path}: {message}")]
    Model { path: PathBuf, message: String },

    #[error("tokenizer: {0}")]
    Tokenizer(String),

    #[error("corpus {path}: {message}")]
    Corpus { path: PathBuf, message: String },

    #[error("corpus `{dataset}`, {file}{}: {message}", column.as_ref().map(|c| format!(", column `{c}`")).unwrap_or_default())]
    Dataset {
        dataset: String,
        file: PathBuf,
        column: Option<String>,
        message: String,
    },

    #[error("dataset `{dataset}` not found in the Hugging Face cache; looked for:\n  {}\n{hint}", looked.join("\n  "))]
    DatasetNotFound {
        dataset: String,
        looked: Vec<String>,
        hint: String,
    },

    #[error("shard {path}: {message}")]
    Shard { path: PathBuf, message: String },
}

impl Error {
    pub fn io(path: impl Into<PathBuf>, error: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            error,
        }
    }

    /// An I/O error naming the operation (`writing`, `renaming into place`, ...) and the path.
    pub fn file(op: &'static str, path: impl Into<PathBuf>, error: std::io::Error) -> Self {
        Error::File {
            op,
            path: path.into(),
            error,
        }
    }

    pub fn config(key: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Config {
            key: key.into(),
            message: message.into(),
        }
    }

    pub fn shard(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Error::Shard {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl From<models::Error> for Error {
    fn from(e: models::Error) -> Self {
        Error::Models(Box::new(e))
    }
}
