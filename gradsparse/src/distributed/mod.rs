//! Data-parallel fine-tuning (`[distributed] mode = "data"`): each rank trains on its own
//! micro-batches, keeps its own error-feedback residual, and the ranks exchange what they selected
//! ([`exchange`]) so that every rank applies the same update and the weights stay identical.
#[cfg(feature = "cuda")]
pub(crate) mod device;
pub mod exchange;

use crate::error::{Error, Result};
use candle_core::{Device, Var};
use collective::{Collective, GradientExchange};
use std::sync::Arc;

/// The ranks a trainer trains with, and how their gradients meet.
#[derive(Clone)]
pub struct Group {
    collective: Arc<dyn Collective>,
    /// The same communicator, for collectives on device buffers.
    #[cfg(feature = "cuda")]
    nccl: Option<Arc<collective::NcclCollective>>,
    pub exchange: GradientExchange,
}

impl Group {
    /// A group over any collective (tests pass [`collective::ThreadCollective`]s); every exchange
    /// then goes through the collective's host calls.
    pub fn new(collective: Arc<dyn Collective>, exchange: GradientExchange) -> Self {
        Self {
            collective,
            #[cfg(feature = "cuda")]
            nccl: None,
            exchange,
        }
    }

    /// A group over NCCL: the dense all-reduce runs on the device buffers, with no copy.
    #[cfg(feature = "cuda")]
    pub fn nccl(nccl: Arc<collective::NcclCollective>, exchange: GradientExchange) -> Self {
        Self {
            collective: nccl.clone(),
            nccl: Some(nccl),
            exchange,
        }
    }

    pub fn collective(&self) -> &dyn Collective {
        self.collective.as_ref()
    }

    #[cfg(feature = "cuda")]
    pub(crate) fn nccl_comm(&self) -> Option<&collective::NcclCollective> {
        self.nccl.as_deref()
    }

    pub fn rank(&self) -> usize {
        self.collective.rank()
    }

    /// The collective itself (the launcher agrees on the run directory, stops and checkpoints
    /// through it).
    pub fn shared(&self) -> Arc<dyn Collective> {
        Arc::clone(&self.collective)
    }

    pub fn world(&self) -> usize {
        self.collective.world()
    }
}

/// The group of a `finetune` run: `None` for `[distributed] mode = "off"` in a plain process.
/// A distributed run needs CUDA devices (NCCL); on the CPU it is refused with a message naming
/// what it needs ([`collective::join`]).
pub fn join(cfg: &collective::DistributedConfig, device: &Device) -> Result<Option<Group>> {
    #[cfg(feature = "cuda")]
    if let (true, Device::Cuda(gpu)) = (cfg.is_distributed(), device) {
        let env = collective::WorldEnv::from_process()
            .map_err(|e| Error::Distributed(e.to_string()))?
            .unwrap_or_else(collective::WorldEnv::single);
        let nccl = collective::NcclCollective::connect(&env, gpu.cuda_stream(), cfg.timeout())
            .map_err(|e| Error::Distributed(e.to_string()))?;
        return Ok(Some(Group::nccl(Arc::new(nccl), cfg.exchange)));
    }
    collective::join(cfg, device)
        .map_err(|e| Error::Distributed(e.to_string()))
        .map(|group| group.map(|c| Group::new(Arc::from(c), cfg.exchange)))
}

/// The device of this rank: with a launcher's environment and a CUDA device in the config, the GPU
/// of `LOCAL_RANK`; otherwise the configured one.
pub fn rank_device(
    cfg: &collective::DistributedConfig,
    spec: runtime::config::DeviceSpec,
) -> Result<runtime::config::DeviceSpec> {
    if !cfg.is_distributed() || !spec.is_cuda() {
        return Ok(spec);
    }
    let env =
        collective::WorldEnv::from_process().map_err(|e| Error::Distributed(e.to_string()))?;
    Ok(env.map_or(spec, |e| runtime::config::DeviceSpec::Cuda(e.local_rank)))
}

/// A 64-bit hash of the weights' bits, in layout order (FxHash's multiply-rotate over 32-bit words:
/// fast enough for billions of parameters; it detects ranks that drifted apart, nothing more).
pub fn weights_hash(vars: &[Var]) -> Result<u64> {
    const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;
    let mut h = 0u64;
    for var in vars {
        let t = var
            .as_tensor()
            .flatten_all()?
            .to_dtype(candle_core::DType::F32)?
            .to_device(&Device::Cpu)?;
        for x in t.to_vec1::<f32>()? {
            h = (h.rotate_left(5) ^ x.to_bits() as u64).wrapping_mul(K);
        }
    }
    Ok(h)
}

/// Checks that every rank holds the same `hash`; the error names the step and the ranks.
pub fn check_hashes(c: &dyn Collective, step: u64, hash: u64) -> Result<()> {
    let all = collective::all_gather(c, &[hash]).map_err(|e| Error::Distributed(e.to_string()))?;
    let hashes: Vec<u64> = all
        .iter()
        .map(|h| h.first().copied().unwrap_or(0))
        .collect();
    if hashes.iter().any(|&h| h != hashes[0]) {
        let listed: Vec<String> = hashes
            .iter()
            .enumerate()
            .map(|(r, h)| format!("rank {r}: {h:016x}"))
            .collect();
        return Err(Error::Distributed(format!(
            "the ranks' weights differ after step {step} ({})",
            listed.join(", ")
        )));
    }
    Ok(())
}
