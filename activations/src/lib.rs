//! Activations for sparse-autoencoder training: GPT-2 in candle with residual-stream hook points,
//! the GPT-2 tokenizer and text corpora, extraction into sharded safetensors, and a shuffled reader.
pub mod corpus;
pub mod error;
pub mod fsutil;
pub mod gpt2;
pub mod models;
pub mod ops;
pub mod prefetch;
pub mod shards;
pub mod source;
pub mod tiny;
pub mod tokenizer;
pub mod upload;

pub use error::{Error, Result};
pub use gpt2::{Gpt2, Gpt2Config, HookPoint};
pub use shards::{ReaderOptions, ShardReader};
pub use source::{ActivationSource, OnTheFly, OnTheFlyOptions};
pub use tokenizer::Gpt2Tokenizer;
