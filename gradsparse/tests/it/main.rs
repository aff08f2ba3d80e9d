//! The integration tests of this crate, one module per former test file, linked as one binary.
//! install_default.rs stays a binary of its own: it sets the process's SPARSETRAIN_CACHE.

mod adamw;
mod config;
mod dense;
mod distributed;
mod exchange;
mod feedback;
mod memory;
mod ranks_command;
mod training;
mod unigram;
