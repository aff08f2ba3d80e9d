use thiserror::Error;

/// Every failure of the collective layer, naming the variable, rank or peer at fault.
#[derive(Debug, Error)]
pub enum Error {
    /// A launcher variable is missing or malformed.
    #[error("environment variable {var}: {reason}")]
    Env { var: &'static str, reason: String },
    /// The unique id's exchange failed; the message names the rank that did not take part.
    #[error("bootstrap of rank {rank} of {world}: {reason}")]
    Bootstrap {
        rank: usize,
        world: usize,
        reason: String,
    },
    /// Some ranks did not reach a collective in time.
    #[error("rank(s) {missing:?} of {world} did not reach the collective within {seconds} s")]
    Timeout {
        missing: Vec<usize>,
        world: usize,
        seconds: f64,
    },
    /// Buffers or arguments that differ between ranks, or do not fit the call.
    #[error("collective call: {0}")]
    Call(String),
    /// The NCCL library or the CUDA driver failed.
    #[error("NCCL: {0}")]
    Nccl(String),
}

pub type Result<T> = std::result::Result<T, Error>;
