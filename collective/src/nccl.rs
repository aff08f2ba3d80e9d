//! [`Collective`] over NCCL, one process per GPU.
//!
//! The trait's calls take host buffers: each copies them to the device, runs the NCCL collective on
//! the communicator's stream and copies the result back, synchronizing the stream. That suits the
//! small exchanges of the sharded selection (counts, samples, candidates); large device-resident
//! buffers (gradients, reconstructions) should go through [`NcclCollective::comm`] directly, on the
//! stream the model computes on, with no copy.
//!
//! The communicator starts from rank 0's unique id, handed to the other ranks by
//! [`crate::bootstrap`], so the same binary runs across hosts.

use crate::bootstrap::{share_from_root, Rendezvous};
use crate::{Collective, Error, Result, WorldEnv};
pub use cudarc::driver::CudaStream;
use cudarc::driver::{CudaSlice, DeviceRepr, DriverError, ValidAsZeroBits};
use cudarc::nccl::result::NcclError;
use cudarc::nccl::safe::{Comm, Id, NcclType, ReduceOp};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// Bytes of NCCL's unique id.
const ID_BYTES: usize = 128;

/// This rank's NCCL communicator.
pub struct NcclCollective {
    comm: Mutex<CommCell>,
    stream: Arc<CudaStream>,
    rank: usize,
    world: usize,
}

/// A communicator may move between threads but not be used by two at once: the mutex around it
/// serializes every call.
struct CommCell(Comm);
// SAFETY: NCCL communicators are not bound to the thread that made them; `NcclCollective` only
// reaches the communicator through its mutex, so no two threads use it at the same time.
unsafe impl Send for CommCell {}

fn nccl(what: &str, e: NcclError) -> Error {
    Error::Nccl(format!("{what}: {:?}", e.0))
}

fn driver(what: &str, e: DriverError) -> Error {
    Error::Nccl(format!("{what}: CUDA driver {e:?}"))
}

impl NcclCollective {
    /// Joins the job `env` describes: rank 0 makes the unique id and hands it out over TCP
    /// (waiting up to `timeout` for every rank), then every rank joins the communicator on
    /// `stream` (the GPU of `env.local_rank`, normally).
    pub fn connect(env: &WorldEnv, stream: Arc<CudaStream>, timeout: Duration) -> Result<Self> {
        let rv = Rendezvous::from_env(env, timeout);
        let bytes = share_from_root(&rv, || {
            let id = Id::new().map_err(|e| nccl("ncclGetUniqueId", e))?;
            Ok(id.internal().iter().map(|&c| c as u8).collect())
        })?;
        let internal: [std::ffi::c_char; ID_BYTES] = bytes
            .iter()
            .map(|&b| b as std::ffi::c_char)
            .collect::<Vec<_>>()
            .try_into()
            .map_err(|_| {
                Error::Nccl(format!(
                    "the unique id from rank 0 has {} bytes, not {ID_BYTES}",
                    bytes.len()
                ))
            })?;
        let comm = Comm::from_rank(stream.clone(), env.rank, env.world, Id::uninit(internal))
            .map_err(|e| nccl("ncclCommInitRank", e))?;
        Ok(Self {
            comm: Mutex::new(CommCell(comm)),
            stream,
            rank: env.rank,
            world: env.world,
        })
    }

    /// Runs `f` with the communicator, for collectives on device buffers (on [`Self::stream`]);
    /// no other call of this rank runs meanwhile.
    pub fn with_comm<R>(&self, f: impl FnOnce(&Comm) -> R) -> R {
        f(&self.lock().0)
    }

    /// The stream every collective of this communicator is ordered on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    fn lock(&self) -> MutexGuard<'_, CommCell> {
        self.comm.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn to_device<T: DeviceRepr>(&self, host: &[T]) -> Result<CudaSlice<T>> {
        self.stream
            .clone_htod(host)
            .map_err(|e| driver("copy to the device", e))
    }

    fn to_host<T: DeviceRepr>(&self, dev: &CudaSlice<T>, host: &mut [T]) -> Result<()> {
        self.stream
            .memcpy_dtoh(dev, host)
            .and_then(|()| self.stream.synchronize())
            .map_err(|e| driver("copy to the host", e))
    }

    fn all_reduce_sum<T: DeviceRepr + NcclType>(&self, buf: &mut [T]) -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let mut dev = self.to_device(buf)?;
        self.lock()
            .0
            .all_reduce_in_place(&mut dev, &ReduceOp::Sum)
            .map_err(|e| nccl("ncclAllReduce", e))?;
        self.to_host(&dev, buf)
    }

    /// Every rank's `mine` (of one length on every rank), concatenated in rank order.
    fn all_gather_equal<T: DeviceRepr + NcclType + ValidAsZeroBits>(
        &self,
        mine: &[T],
    ) -> Result<Vec<T>> {
        let send = self.to_device(mine)?;
        let mut recv = self
            .stream
            .alloc_zeros::<T>(mine.len() * self.world)
            .map_err(|e| driver("allocation", e))?;
        self.lock()
            .0
            .all_gather(&send, &mut recv)
            .map_err(|e| nccl("ncclAllGather", e))?;
        self.stream
            .clone_dtoh(&recv)
            .and_then(|out| self.stream.synchronize().map(|()| out))
            .map_err(|e| driver("copy to the host", e))
    }

    /// Root's `buf` (of the length every rank passes) on every rank.
    fn broadcast_equal<T: DeviceRepr + NcclType>(&self, root: usize, buf: &mut [T]) -> Result<()> {
        let mut dev = self.to_device(buf)?;
        self.lock()
            .0
            .broadcast_in_place(&mut dev, root as i32)
            .map_err(|e| nccl("ncclBroadcast", e))?;
        self.to_host(&dev, buf)
    }
}

impl Collective for NcclCollective {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world(&self) -> usize {
        self.world
    }

    fn all_reduce_sum_f32(&self, buf: &mut [f32]) -> Result<()> {
        self.all_reduce_sum(buf)
    }

    fn all_reduce_sum_f64(&self, buf: &mut [f64]) -> Result<()> {
        self.all_reduce_sum(buf)
    }

    fn all_reduce_sum_u64(&self, buf: &mut [u64]) -> Result<()> {
        self.all_reduce_sum(buf)
    }

    /// Lengths first, then every rank's bytes padded to the longest.
    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let lens = self.all_gather_equal(&[mine.len() as u64])?;
        let longest = lens.iter().copied().max().unwrap_or(0) as usize;
        if longest == 0 {
            return Ok(vec![Vec::new(); self.world]);
        }
        let mut padded = mine.to_vec();
        padded.resize(longest, 0);
        let all = self.all_gather_equal(&padded)?;
        Ok(all
            .chunks(longest)
            .zip(&lens)
            .map(|(chunk, &len)| chunk[..len as usize].to_vec())
            .collect())
    }

    /// The length first, then the bytes.
    fn broadcast_bytes(&self, root: usize, buf: &mut Vec<u8>) -> Result<()> {
        if root >= self.world {
            return Err(Error::Call(format!(
                "broadcast from rank {root} in a group of {}",
                self.world
            )));
        }
        let mut len = [buf.len() as u64];
        self.broadcast_equal(root, &mut len)?;
        buf.resize(len[0] as usize, 0);
        if len[0] > 0 {
            self.broadcast_equal(root, buf)?;
        }
        Ok(())
    }

    /// NCCL has no barrier: a one-element all-reduce returns once every rank has entered it.
    fn barrier(&self) -> Result<()> {
        self.all_reduce_sum_u64(&mut [0])
    }

    fn all_reduce_sum_device(
        &self,
        t: &candle_core::Tensor,
    ) -> Option<Result<candle_core::Tensor>> {
        if !t.device().is_cuda() {
            return None;
        }
        Some(
            t.contiguous()
                .and_then(|t| t.apply_op1_no_bwd(&DeviceSum(self)))
                .map_err(|e| Error::Nccl(format!("device all-reduce: {e}"))),
        )
    }
}

/// The sum of a device tensor over the ranks into a fresh buffer, as a candle op (so that it
/// runs on the tensor's own storage, with no host copy).
struct DeviceSum<'a>(&'a NcclCollective);

impl candle_core::CustomOp1 for DeviceSum<'_> {
    fn name(&self) -> &'static str {
        "nccl-all-reduce-sum"
    }

    fn cpu_fwd(
        &self,
        _: &candle_core::CpuStorage,
        _: &candle_core::Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
        candle_core::bail!("the NCCL all-reduce takes CUDA tensors")
    }

    fn cuda_fwd(
        &self,
        storage: &candle_core::CudaStorage,
        layout: &candle_core::Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, candle_core::Shape)> {
        let n = layout.shape().elem_count();
        let start = layout.start_offset();
        let src = storage.as_cuda_slice::<f32>()?.slice(start..start + n);
        let mut out = self
            .0
            .stream
            .alloc_zeros::<f32>(n)
            .map_err(|e| candle_core::Error::Msg(format!("allocation: {e:?}")))?;
        self.0
            .lock()
            .0
            .all_reduce(&src, &mut out, &ReduceOp::Sum)
            .map_err(|e| candle_core::Error::Msg(format!("ncclAllReduce: {:?}", e.0)))?;
        let device = storage.device.clone();
        Ok((
            candle_core::CudaStorage::wrap_cuda_slice(out, device),
            layout.shape().clone(),
        ))
    }
}
