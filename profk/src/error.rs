use thiserror::Error;

/// Every failure of the selector, with the context a caller needs to find the cause.
#[derive(Debug, Error)]
pub enum Error {
    #[error("k = {k} exceeds the {n} elements of each selection")]
    KTooLarge { k: usize, n: usize },
    #[error("input holds {count} NaN value(s), the first at flat index {first}; pass nan = largest to rank NaN above +inf")]
    NaN { count: usize, first: usize },
    #[error("unsupported dtype {0:?} for top-k")]
    DType(candle_core::DType),
    #[error("invalid shape {shape:?}: {reason}")]
    Shape { shape: Vec<usize>, reason: String },
    #[error("invalid parameter: {0}")]
    Param(String),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

pub type Result<T> = std::result::Result<T, Error>;
