//! Training over a group of ranks, data-parallel (`[distributed] mode = "data"`): each rank steps on
//! its own rows of the global batch, the gradients are summed over the ranks, and every
//! batch-global quantity (the BatchTopK selection, the dead latents, the aux-k loss's spread, the
//! inference threshold, the logged metrics) is taken over the global batch, so that W ranks train
//! the model one process would train on the same global batches.
//!
//! The selection is global by the sharded Prof-K (`select = "global"`, exact: the 1-rank selection
//! of the global batch) or each rank's own top-(B_r·k) (`select = "local"`). Every collective goes
//! through one [`Metered`] wrapper, whose counts the train records log.
use crate::select::{sync, Selected};
use crate::Result;
use candle_core::{DType, Tensor};
use collective::{Collective, DistributedConfig, Metered, SelectScope, WireCount};
use profk::sharded::Block;
use std::sync::Arc;
use std::time::Instant;

/// The group a trainer runs in.
pub struct Ranks {
    comm: Metered,
    pub select: SelectScope,
}

/// This rank's rows of one global batch.
#[derive(Clone, Copy)]
pub struct BatchShare<'a> {
    pub ranks: &'a Ranks,
    /// Global index of this rank's first row.
    pub offset: usize,
    /// Rows of the global batch.
    pub global: usize,
    /// Rows of this rank.
    pub local: usize,
}

impl Ranks {
    /// The group `comm` joined, trained as `cfg` says.
    pub fn new(comm: Arc<dyn Collective>, cfg: &DistributedConfig) -> Ranks {
        Ranks {
            comm: Metered::new(comm),
            select: cfg.select,
        }
    }

    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    pub fn world(&self) -> usize {
        self.comm.world()
    }

    pub fn comm(&self) -> &dyn Collective {
        &self.comm
    }

    /// Bytes handed to the wire and time in collectives so far.
    pub fn wire(&self) -> WireCount {
        self.comm.count()
    }

    /// Where this rank's `local` rows lie in the global batch (every rank's count, gathered).
    pub fn share(&self, local: usize) -> Result<BatchShare<'_>> {
        let counts = collective::all_gather(&self.comm, &[local as u64])?;
        let count = |r: &Vec<u64>| r.first().copied().unwrap_or(0) as usize;
        let offset = counts[..self.rank()].iter().map(count).sum();
        let global = counts.iter().map(count).sum();
        Ok(BatchShare {
            ranks: self,
            offset,
            global,
            local,
        })
    }

    /// The sum of an f32 tensor over the ranks: on the device through NCCL on CUDA, through the
    /// host otherwise.
    pub fn sum(&self, t: &Tensor) -> Result<Tensor> {
        Ok(collective::all_reduce_sum_tensor(&self.comm, t)?)
    }

    /// The sum over the ranks of a few host numbers (metrics, statistics).
    pub fn sum_f64(&self, v: &mut [f64]) -> Result<()> {
        Ok(self.comm.all_reduce_sum_f64(v)?)
    }

    /// The smallest of every rank's `v`.
    pub fn min_f32(&self, v: f32) -> Result<f32> {
        let all = collective::all_gather(&self.comm, &[v])?;
        Ok(all.iter().flatten().copied().fold(f32::INFINITY, f32::min))
    }

    /// Every rank's rows of `t` [rows, ...], stacked in rank order (the same tensor on every rank).
    pub fn gather_rows(&self, t: &Tensor) -> Result<Tensor> {
        let dims = t.dims().to_vec();
        let host = t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        let all: Vec<f32> = collective::all_gather(&self.comm, &host)?
            .into_iter()
            .flatten()
            .collect();
        let row: usize = dims[1..].iter().product();
        let mut shape = dims;
        shape[0] = all.len() / row.max(1);
        Ok(Tensor::from_vec(all, shape, t.device())?)
    }
}

impl BatchShare<'_> {
    /// Whether the selection spans the ranks (global scope and more than one rank).
    pub fn selects_globally(&self) -> bool {
        self.ranks.select == SelectScope::Global && self.ranks.world() > 1
    }

    /// This rank's share of the global loss: its local mean times local / global rows.
    pub fn weight(&self) -> f64 {
        self.local as f64 / self.global.max(1) as f64
    }

    /// The exact top-`keep` of the global [global, n] score matrix of which this rank holds its rows
    /// `scores` [local, n], by the sharded Prof-K: this rank's selected elements as flat local
    /// indices (row · n + col, i64, ascending), the time it took and its wire.
    pub fn select(&self, scores: &Tensor, keep: usize, seed: u64) -> Result<(Selected, WireCount)> {
        sync(scores)?;
        let wire = self.ranks.wire();
        let t0 = Instant::now();
        let n = scores.dim(1)?;
        // bf16 scores widen exactly: the order and the ties are those of the scores.
        let host = scores
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        let block = Block::rows(
            self.global as u64,
            n as u64,
            self.offset as u64,
            self.local as u64,
        );
        let opts = profk::TopKOptions {
            order: profk::Order::Index,
            seed,
            ..Default::default()
        };
        let exchange: &dyn Collective = &self.ranks.comm;
        let out = profk::sharded::topk(exchange, &host, block, keep, &opts)?;
        let own: Vec<i64> = out.own(&block).into_iter().map(|(_, l)| l as i64).collect();
        let len = own.len();
        let indices = Tensor::from_vec(own, len, scores.device())?;
        sync(&indices)?;
        Ok((
            Selected {
                indices,
                time: t0.elapsed(),
            },
            self.ranks.wire().since(wire),
        ))
    }

    /// The spread of the residuals `e` [local, d] over the global batch: the mean over its tokens
    /// of ‖e_b − mean(e)‖², from the sums Σe and Σ‖e‖² of every rank.
    pub fn spread(&self, residual: &Tensor) -> Result<f64> {
        let sum = residual.sum(0)?;
        let sq = residual.sqr()?.sum_all()?.reshape(1)?;
        let both = self.ranks.sum(&Tensor::cat(&[&sum, &sq], 0)?)?;
        let v = both.to_dtype(DType::F64)?.to_vec1::<f64>()?;
        let (sum, sq) = v.split_at(v.len() - 1);
        let rows = self.global.max(1) as f64;
        let mean_sq: f64 = sum.iter().map(|s| (s / rows) * (s / rows)).sum();
        Ok(sq[0] / rows - mean_sq)
    }
}

/// The device of this rank: `cuda:LOCAL_RANK` when a distributed run on CUDA was started by a
/// launcher, else the configured one.
pub fn rank_device(cfg: &crate::Config) -> Result<runtime::config::DeviceSpec> {
    if !(cfg.distributed.is_distributed() && cfg.device.is_cuda()) {
        return Ok(cfg.device);
    }
    Ok(match collective::WorldEnv::from_process()? {
        Some(env) => runtime::config::DeviceSpec::Cuda(env.local_rank),
        None => cfg.device,
    })
}

/// Joins the group of ranks `[distributed]` asks for (NCCL on CUDA; refused on the CPU), or
/// `None` for a plain run.
pub fn join(
    cfg: &crate::Config,
    device: &candle_core::Device,
) -> Result<Option<harness::RankGroup>> {
    Ok(collective::join(&cfg.distributed, device)?.map(|comm| {
        harness::RankGroup::new(Arc::from(comm)).with_stall_timeout(cfg.distributed.timeout())
    }))
}
