//! Collectives across ranks, one process per GPU.
//!
//! [`Collective`] is what the distributed code calls: sums of f32/f64/u64 buffers, gathers of
//! variable-length buffers, broadcast and barrier, identical on every rank. In production it is
//! [`NcclCollective`] (feature `cuda`): NCCL through cudarc, started by [`bootstrap`] (rank 0's
//! unique id over TCP) from the ranks that [`WorldEnv`] reads off the launcher's environment
//! (torchrun or SLURM). [`ThreadCollective`] runs the same calls between threads of one process: it
//! is the test double that lets the rank logic run in CI, no transport for users.

pub mod bootstrap;
mod config;
pub mod env;
mod error;
mod exchange;
mod join;
pub mod launch;
mod metered;
mod tensor;
pub use config::{DistributedConfig, DistributedMode, GradientExchange, SelectScope};
pub use exchange::AsExchange;
pub use join::join;
pub use metered::{Metered, WireCount};
pub use tensor::{all_reduce_sum_tensor, tensor_bytes};
#[cfg(feature = "cuda")]
mod nccl;
mod thread;

pub use bootstrap::{share_from_root, Rendezvous};
pub use env::{first_host, Launcher, WorldEnv};
pub use error::{Error, Result};
#[cfg(feature = "cuda")]
pub use nccl::NcclCollective;
pub use thread::ThreadCollective;

/// Collective calls of one rank. Every rank of the group makes the same calls in the same order;
/// a call returns once every rank has made it (or with an error naming those that did not).
///
/// Sums are computed in rank order on every rank, so their results are identical across ranks.
pub trait Collective: Send + Sync {
    /// This rank, in `0..world()`.
    fn rank(&self) -> usize;
    /// Ranks in the group.
    fn world(&self) -> usize;
    /// Element-wise sum over the ranks, in place; every rank passes the same length.
    fn all_reduce_sum_f32(&self, buf: &mut [f32]) -> Result<()>;
    /// Element-wise sum over the ranks, in place; every rank passes the same length.
    fn all_reduce_sum_f64(&self, buf: &mut [f64]) -> Result<()>;
    /// Element-wise sum over the ranks, in place; every rank passes the same length.
    fn all_reduce_sum_u64(&self, buf: &mut [u64]) -> Result<()>;
    /// Every rank's bytes, in rank order; the lengths may differ between ranks.
    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>>;
    /// Replaces `buf` on every rank by `root`'s bytes (whose length the others need not know).
    fn broadcast_bytes(&self, root: usize, buf: &mut Vec<u8>) -> Result<()>;
    /// Returns once every rank has called it.
    fn barrier(&self) -> Result<()>;
    /// The sum over the ranks of the f32 tensor `t` on its device, with no host copy, where this
    /// collective can (NCCL on a CUDA tensor); `None`: use the host calls
    /// ([`all_reduce_sum_tensor`] does either).
    fn all_reduce_sum_device(
        &self,
        _t: &candle_core::Tensor,
    ) -> Option<Result<candle_core::Tensor>> {
        None
    }
}

/// Every rank's elements, in rank order; the lengths may differ between ranks.
pub fn all_gather<T: bytemuck::Pod>(c: &dyn Collective, mine: &[T]) -> Result<Vec<Vec<T>>> {
    c.all_gather_bytes(bytemuck::cast_slice(mine))?
        .into_iter()
        .enumerate()
        .map(|(rank, bytes)| {
            if bytes.len() % size_of::<T>() != 0 {
                return Err(Error::Call(format!(
                    "rank {rank} sent {} bytes, not a whole number of {}-byte elements",
                    bytes.len(),
                    size_of::<T>()
                )));
            }
            // The received bytes carry no alignment guarantee for T: copy them out.
            Ok(bytemuck::pod_collect_to_vec(&bytes))
        })
        .collect()
}
