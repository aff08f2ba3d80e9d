//! GPT-2 (all four sizes) in candle, with residual-stream hook points.
mod config;
mod hook;
mod load;
mod model;

pub use config::Gpt2Config;
pub use hook::HookPoint;
pub use load::{hf_cache_roots, hf_shapes, hf_snapshot_dir, locate, ModelFiles};
pub use model::{Gpt2, Patch, DEFAULT_ATTENTION_CHUNK};
