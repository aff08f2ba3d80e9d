//! GPT-2 (all four sizes) in candle, with residual-stream hook points; the fused ops of its block
//! ([`ops`]: forward kernels for extraction, differentiable ones for training) and, on CUDA, their
//! kernels and the memory pool.
mod config;
pub mod error;
mod hook;
mod load;
mod model;
pub mod ops;

pub use config::Gpt2Config;
pub use error::{Error, Result};
pub use hook::HookPoint;
pub use load::{hf_cache_roots, hf_shapes, hf_snapshot_dir, locate, ModelFiles};
pub use model::{causal_mask, Gpt2, Patch, DEFAULT_ATTENTION_CHUNK};
