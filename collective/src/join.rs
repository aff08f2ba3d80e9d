//! Joining the group of ranks a training command runs in.

use crate::{Collective, DistributedConfig, Error, Result, WorldEnv};

/// The group this process trains in, or `None` for a plain single-process run.
///
/// A distributed mode needs CUDA devices: the ranks talk through NCCL, on the stream of `device`
/// (which the caller opened as the GPU of this rank's `LOCAL_RANK`). On the CPU it is refused:
/// the thread-backed [`crate::ThreadCollective`] is a test double, not a transport. Without a
/// launcher's environment a distributed mode runs as rank 0 of 1, through NCCL all the same.
pub fn join(
    cfg: &DistributedConfig,
    device: &candle_core::Device,
) -> Result<Option<Box<dyn Collective>>> {
    let env = WorldEnv::from_process()?;
    if !cfg.is_distributed() {
        if let Some(env) = env.filter(|e| e.world > 1) {
            return Err(Error::Call(format!(
                "this process was launched as rank {} of {} ({:?}), but [distributed] mode = \"off\"; \
                 set distributed.mode to \"data\" or \"latents\", or launch one process",
                env.rank, env.world, env.launcher
            )));
        }
        return Ok(None);
    }
    let env = env.unwrap_or_else(WorldEnv::single);
    connect(cfg, device, &env).map(Some)
}

#[cfg(feature = "cuda")]
fn connect(
    cfg: &DistributedConfig,
    device: &candle_core::Device,
    env: &WorldEnv,
) -> Result<Box<dyn Collective>> {
    match device {
        candle_core::Device::Cuda(gpu) => {
            let nccl = crate::NcclCollective::connect(env, gpu.cuda_stream(), cfg.timeout())?;
            Ok(Box::new(nccl))
        }
        other => Err(refuse(other)),
    }
}

#[cfg(not(feature = "cuda"))]
fn connect(
    _: &DistributedConfig,
    device: &candle_core::Device,
    _: &WorldEnv,
) -> Result<Box<dyn Collective>> {
    Err(refuse(device))
}

fn refuse(device: &candle_core::Device) -> Error {
    let built = if cfg!(feature = "cuda") {
        ""
    } else {
        " and a build with the `cuda` feature"
    };
    Error::Call(format!(
        "[distributed] mode needs CUDA devices (the ranks talk through NCCL){built}; this run's \
         device is {device:?}. Set distributed.mode = \"off\" to train in one process"
    ))
}
