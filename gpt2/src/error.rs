//! The crate's one error type: every variant names what went wrong and where.
use std::path::PathBuf;

pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Candle(#[from] candle_core::Error),

    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(transparent)]
    Write(#[from] runtime::fs::Error),

    #[error("{path}: invalid JSON: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },

    #[error("config: `{key}`: {message}")]
    Config { key: String, message: String },

    #[error("model `{name}` not found; looked in:\n  {}\n{hint}", looked.join("\n  "))]
    ModelNotFound {
        name: String,
        looked: Vec<String>,
        hint: String,
    },

    #[error("model {path}: {message}")]
    Model { path: PathBuf, message: String },

    #[error("hook point `{point}` is past the model's depth: it has {n_layer} layers, valid layers are 0..={}", n_layer.saturating_sub(1))]
    HookLayer { point: String, n_layer: usize },

    #[error("hook point `{point}`: {model} exposes only {offered}")]
    HookUnsupported {
        point: String,
        model: String,
        offered: String,
    },

    #[error("hook point `{0}`: expected e.g. `blocks.6.hook_resid_post`, `blocks.0.hook_resid_pre`, `blocks.6.hook_attn_out`, `blocks.6.hook_mlp_out`, `blocks.6.ln2.hook_normalized`, `resid_post.6`, `ln_final`")]
    HookPoint(String),
}

impl Error {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    pub fn config(key: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Config {
            key: key.into(),
            message: message.into(),
        }
    }
}
