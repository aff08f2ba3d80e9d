//! The integration tests of this crate, one module per former test file, linked as one binary.
//! crosscoder_ce.rs and tiny_end_to_end.rs stay binaries of their own: they set the process's
//! SPARSETRAIN_CACHE.

#[path = "../common/mod.rs"]
mod common;

mod config_errors;
mod distributed;
mod features;
mod fuzz_config;
mod matryoshka;
mod ranks_command;
mod reference;
mod robust_disk_full;
mod robust_limits;
mod shard_stream;
mod sparse_ops;
mod training;
