//! The integration tests of this crate, one module per former test file, linked as one binary.
//! bootstrap_processes.rs stays a binary of its own (`harness = false`): it starts copies of itself
//! as the ranks.

mod launch;
mod nccl_one_rank;
mod sharded_statistics;
mod sharded_topk;
