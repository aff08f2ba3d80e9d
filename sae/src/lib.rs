//! Sparse autoencoders trained with batch-global exact top-k selection (Prof-K): BatchTopK, Matryoshka
//! BatchTopK and the acausal BatchTopK crosscoder, with the recipe users expect (aux-k loss, unit-norm
//! decoder, geometric-median b_dec, input scaling, Adam with warm-up and decay) and SAELens-compatible
//! checkpoints.

pub mod arch;
pub mod aux;
pub mod aux_dense;
pub mod checkpoint;
pub mod config;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod data;
pub mod distributed;
pub mod error;
pub mod features;
pub mod hub;
pub mod init;
pub mod memory;
pub mod model;
pub mod neuronpedia;
pub mod optim;
pub mod run;
mod scores;
pub mod select;
pub mod sparse;
pub mod trainer;

pub use config::Config;
pub use error::{Error, Result};
pub use model::Sae;
pub use trainer::Trainer;
