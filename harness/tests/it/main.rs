//! The integration tests of this crate, one module per former test file, linked as one binary.

#[path = "../common/mod.rs"]
mod common;

mod background_checkpoints;
mod fuzz_metrics;
mod launch;
mod ranks;
mod robust_outputs;
mod sink;
mod train_loop;
mod wandb;
