/// Errors of the measures: the model or tensors failed, or a reconstruction has the wrong shape.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("evaluation: {0}")]
    Shape(String),
    /// The reconstruction function failed.
    #[error("reconstruction: {0}")]
    Reconstruct(crate::measures::ReconstructError),
    #[error(transparent)]
    Activations(#[from] activations::Error),
    #[error(transparent)]
    Model(#[from] gpt2::Error),

    /// Boxed: the family loaders' error is large.
    #[error(transparent)]
    Models(Box<models::Error>),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

pub type Result<T> = std::result::Result<T, Error>;

impl From<models::Error> for Error {
    fn from(e: models::Error) -> Self {
        Error::Models(Box::new(e))
    }
}
