//! Activations for sparse-autoencoder training: the GPT-2 tokenizer and text corpora, extraction of
//! the model's (crate `gpt2`) hook points into sharded safetensors, and a shuffled reader.
pub mod corpus;
pub mod error;
pub mod fsutil;
pub mod memory;
pub mod models;
pub mod prefetch;
pub mod shards;
pub mod source;
pub mod tiny;
pub mod tokenizer;
pub mod upload;

pub use error::{Error, Result};
pub use shards::{ReaderOptions, ShardReader};
pub use source::{ActivationSource, OnTheFly, OnTheFlyOptions};
pub use tokenizer::{Gpt2Tokenizer, Tokenizer};
