//! The integration tests of this crate, one module per former test file, linked as one binary.
//! gpt2.rs (it sets the process's HF_HUB_CACHE), train_linear.rs and train_attention.rs (they turn
//! candle's process-wide TF32 flag on and off) stay binaries of their own.

#[path = "../common/mod.rs"]
mod common;

mod chunked_cross_entropy;
mod cross_entropy;
mod ops;
mod patch_many;
mod train_layer_norm;
