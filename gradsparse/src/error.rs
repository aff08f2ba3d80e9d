use std::path::PathBuf;

/// Every failure of fine-tuning, with the key, file or step it concerns.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("config key `{key}`: {message}")]
    Config { key: String, message: String },
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("checkpoint {path}: {message}")]
    Checkpoint { path: PathBuf, message: String },
    #[error("selectors disagree at step {step}: {primary:?} and {secondary:?} returned different index sets ({detail})")]
    SelectorMismatch {
        step: u64,
        primary: profk::Selector,
        secondary: profk::Selector,
        detail: String,
    },
    #[error("parameter `{name}`: {message}")]
    Param { name: String, message: String },
    #[error("non-finite loss {loss} at step {step}")]
    NonFinite { step: u64, loss: f32 },
    /// The ranks of a data-parallel run: joining, a collective, or weights that drifted apart.
    #[error("distributed: {0}")]
    Distributed(String),
    #[error(transparent)]
    Selector(#[from] profk::Error),
    #[error(transparent)]
    Harness(#[from] harness::Error),
    #[error(transparent)]
    Runtime(#[from] runtime::Error),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn config(key: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Config {
            key: key.into(),
            message: message.into(),
        }
    }

    pub(crate) fn file(path: impl Into<PathBuf>, message: impl std::fmt::Display) -> Self {
        Error::File {
            path: path.into(),
            message: message.to_string(),
        }
    }
}
