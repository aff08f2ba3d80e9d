//! One training step of any architecture: forward, aux-k loss, backward, decoder-gradient projection,
//! clipping, Adam, decoder renormalization, dead-latent and threshold bookkeeping, and the step's metrics.
use crate::arch;
use crate::aux::{aux_loss, DeadTracker};
use crate::config::Config;
use crate::distributed::Ranks;
use crate::init::{geometric_median, unit_square_norm_scales};
use crate::model::{Sae, Shape};
use crate::optim::{collect_grads, lr_at, Adam};
use crate::select::{cross_check, sync};
use crate::sparse::fired_latents;
use crate::{Error, Result};
use candle_core::{DType, Device, Tensor};
use eval::measures::mse_fvu;
use serde::Serialize;
use std::sync::Arc;
use std::time::Instant;

/// Everything that changes while training; saved whole in a checkpoint.
pub struct Trainer {
    pub cfg: Config,
    pub sae: Sae,
    pub adam: Adam,
    pub dead: DeadTracker,
    /// Inference threshold in the scaled input space; negative until the first update.
    pub threshold: f64,
    /// Per-layer input scale factors (all 1 without `normalize_input`).
    pub scales: Vec<f64>,
    pub step: u64,
    pub tokens: u64,
    /// Wait for the device after each stage of a step and report the stage times (benchmarks).
    pub profile: bool,
    /// The group of ranks this trainer steps with (data-parallel), or `None` in one process.
    pub ranks: Option<Arc<Ranks>>,
}

/// Metrics of one step.
#[derive(Clone, Debug, Default, Serialize)]
pub struct StepStats {
    pub step: u64,
    pub tokens: u64,
    pub loss: f64,
    pub mse: f64,
    pub fvu: f64,
    pub l0: f64,
    pub dead_fraction: f64,
    pub aux_loss: f64,
    pub threshold: f64,
    pub lr: f64,
    pub grad_norm: f64,
    pub step_ms: f64,
    pub select_ms: f64,
    pub select_share: f64,
    /// Time of the in-run check's selection (`selector.compare_with` on the same scores), on the
    /// steps that ran it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compare_ms: Option<f64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub layer_fvu: Vec<f64>,
    /// In a group of ranks: the bytes this rank handed to the collectives this step, the time in
    /// them, and the selection's share of both.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub wire: Option<StepWire>,
    /// Stage times with `profile` (else all 0).
    #[serde(skip)]
    pub stages: Stages,
}

/// A step's collectives on this rank (the metric names every training command shares).
#[derive(Clone, Debug, Default, Serialize)]
pub struct StepWire {
    pub wire_bytes: u64,
    pub collective_ms: f64,
    pub select_wire_bytes: u64,
    pub select_collective_ms: f64,
}

/// Milliseconds per stage of a profiled step.
#[derive(Clone, Debug, Default)]
pub struct Stages {
    /// Dense scores: encoder matmul, bias, ReLU.
    pub scores: f64,
    pub select: f64,
    /// The rest of the forward pass: kept values, decode, loss.
    pub forward_rest: f64,
    /// Aux-k selection, values, decode and loss.
    pub aux: f64,
    pub backward: f64,
    /// Projection, clipping, Adam, renormalization.
    pub optimizer: f64,
    /// Dead-latent counters, threshold.
    pub bookkeeping: f64,
}

impl Stages {
    /// The stages by name, in step order.
    pub fn named(&self) -> [(&'static str, f64); 7] {
        [
            ("scores", self.scores),
            ("select", self.select),
            ("forward_rest", self.forward_rest),
            ("aux", self.aux),
            ("backward", self.backward),
            ("optimizer", self.optimizer),
            ("bookkeeping", self.bookkeeping),
        ]
    }
}

impl Trainer {
    /// A fresh model initialized from `first` [B, L, d]: input scales, b_dec = geometric median, W_enc = W_decᵀ.
    pub fn new(cfg: Config, first: &Tensor, device: &Device) -> Result<Self> {
        let (_, layers, d_model) = first.dims3()?;
        let shape = Shape {
            arch: cfg.sae.arch,
            d_model,
            layers,
            n: cfg.sae.latents,
            k: cfg.sae.k,
            groups: cfg.sae.group_sizes.clone(),
        };
        let scales = if cfg.sae.normalize_input {
            unit_square_norm_scales(first)?
        } else {
            vec![1.0; layers]
        };
        let x = scale_and_stack(first, &scales)?;
        let median = geometric_median(&x, 100)?;
        let b_dec = Tensor::from_vec(median, shape.d_in(), device)?;
        let sae = Sae::init(shape, &b_dec, cfg.sae.decode, cfg.seed, device)?;
        Self::with_sae(cfg, sae, scales)
    }

    /// A fresh model trained in the group `ranks`, from this rank's rows `first` of the first
    /// global batch: every rank initializes from the whole first batch (gathered), so that every
    /// rank starts from the model one process would start from on it.
    pub fn new_in(cfg: Config, first: &Tensor, device: &Device, ranks: Arc<Ranks>) -> Result<Self> {
        let global = ranks.gather_rows(first)?;
        let mut trainer = Self::new(cfg, &global, device)?;
        trainer.ranks = Some(ranks);
        Ok(trainer)
    }

    pub fn with_sae(cfg: Config, mut sae: Sae, scales: Vec<f64>) -> Result<Self> {
        sae.bf16_scores = cfg.train.precision == crate::config::Precision::Bf16;
        sae.tf32_scores = cfg.train.precision == crate::config::Precision::Tf32;
        sae.sinks = Some(Default::default());
        let adam = Adam::new(&sae.vars(), &cfg.train)?;
        let dead = DeadTracker::new(sae.shape.n, cfg.sae.aux.dead_tokens, sae.device())?;
        Ok(Self {
            cfg,
            sae,
            adam,
            dead,
            threshold: -1.0,
            scales,
            step: 0,
            tokens: 0,
            profile: false,
            ranks: None,
        })
    }

    /// Raw activations [B, L, d] → scaled, stacked model inputs [B, L·d] on the model's device.
    pub fn prepare(&self, raw: &Tensor) -> Result<Tensor> {
        scale_and_stack(
            &raw.to_device(self.sae.device())?.to_dtype(DType::F32)?,
            &self.scales,
        )
    }

    fn k_aux(&self) -> usize {
        match self.cfg.sae.aux.k_aux {
            0 => (self.sae.shape.d_in() / 2).max(1),
            k => k,
        }
    }

    /// One optimization step on raw activations [B, L, d]; full metrics when `metrics` is set.
    pub fn train_step(&mut self, raw: &Tensor, metrics: bool) -> Result<StepStats> {
        let t0 = Instant::now();
        if let Some(sinks) = &self.sae.sinks {
            // A step that failed after its backward must not leak gradients into this one.
            sinks.w_enc.take()?;
            sinks.w_dec.take()?;
        }
        let x = self.prepare(raw)?;
        let selector = self.cfg.selector.kind;
        let seed = self.cfg.seed ^ self.step.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let ranks = self.ranks.clone();
        let wire_start = ranks.as_ref().map(|r| r.wire());
        let share = match &ranks {
            Some(r) => Some(r.share(x.dim(0)?)?),
            None => None,
        };
        let share = share.as_ref();
        let mut lap = Lap::new(self.profile, &x);
        let mut fwd = arch::forward_in(&self.sae, &x, selector, seed, share)?;
        let forward_ms = lap.next()?;
        let keep = fwd.enc.idx.elem_count();
        let sel = &self.cfg.selector;
        // A selection over the ranks is not this rank's own top-k: nothing to check it against here.
        let checkable = !share.is_some_and(|s| s.selects_globally());
        let compare_ms = if checkable && sel.compares_at(self.step) {
            cross_check(&fwd.enc.scores, keep, &fwd.enc.idx, sel, self.step)?
                .map(|t| t.as_secs_f64() * 1e3)
        } else {
            None
        };
        let (dead_mask, n_dead) = self.dead.dead()?;
        let aux = aux_loss(
            &self.sae,
            &fwd.enc,
            fwd.enc.scores.clone(),
            &x,
            &fwd.recon,
            (&dead_mask, n_dead),
            self.k_aux(),
            self.cfg.sae.aux.decode,
            (selector, seed),
            share,
        )?;
        // Each rank's loss is its own mean; weighted by its share of the global batch, the summed
        // gradients are those of the global mean.
        let weight = share.map_or(1.0, |s| s.weight());
        let aux = match aux {
            Some(a) if weight != 1.0 => Some((a * weight)?),
            a => a,
        };
        if weight != 1.0 {
            fwd.loss = (&fwd.loss * weight)?;
        }
        let loss = match &aux {
            Some(a) => (&fwd.loss + (a * self.cfg.sae.aux.coefficient)?)?,
            None => fwd.loss.clone(),
        };
        let aux_ms = lap.next()?;
        let mut grads = collect_grads(&self.sae, &loss.backward()?)?;
        if let Some(r) = &ranks {
            grads = grads.iter().map(|g| r.sum(g)).collect::<Result<_>>()?;
        }
        let backward_ms = lap.next()?;
        let lr = lr_at(self.step, self.cfg.lr(), &self.cfg.train);
        let grad_norm = self
            .adam
            .update(&self.sae, grads, self.cfg.train.grad_clip, lr)?;
        if !grad_norm.is_finite() {
            return Err(Error::NonFinite {
                step: self.step,
                what: "gradient norm".into(),
            });
        }
        let optimizer_ms = lap.next()?;
        let n = self.sae.shape.n;
        match &ranks {
            Some(r) => {
                let fired = r.sum(&fired_latents(&fwd.enc.idx, &fwd.enc.vals, n)?)?;
                self.dead
                    .update_fired(&fired, share.map_or(0, |s| s.global))?;
            }
            None => self.dead.update(&fwd.enc, n)?,
        }
        if self.step >= self.cfg.sae.threshold.start_step {
            self.update_threshold(&fwd.enc.vals)?;
        }
        sync(self.sae.w_dec.as_tensor())?;
        let bookkeeping_ms = lap.next()?;
        let step_ms = t0.elapsed().as_secs_f64() * 1e3;
        let select_ms = fwd.enc.select_time.as_secs_f64() * 1e3;
        let batch = share.map_or(x.dim(0)?, |s| s.global);
        self.step += 1;
        self.tokens += batch as u64;
        let mut stats = StepStats {
            step: self.step,
            tokens: self.tokens,
            threshold: self.threshold,
            lr,
            grad_norm,
            step_ms,
            select_ms,
            select_share: select_ms / step_ms.max(1e-9),
            compare_ms,
            ..Default::default()
        };
        if let (Some(r), Some(start)) = (&ranks, wire_start) {
            let step = r.wire().since(start);
            stats.wire = Some(StepWire {
                wire_bytes: step.bytes,
                collective_ms: step.ms(),
                select_wire_bytes: fwd.enc.select_wire.bytes,
                select_collective_ms: fwd.enc.select_wire.ms(),
            });
        }
        if self.profile {
            let scores = fwd.enc.scores_time.as_secs_f64() * 1e3;
            stats.stages = Stages {
                scores,
                select: select_ms,
                forward_rest: forward_ms - scores - select_ms,
                aux: aux_ms,
                backward: backward_ms,
                optimizer: optimizer_ms,
                bookkeeping: bookkeeping_ms,
            };
        }
        if metrics {
            stats.loss = loss.to_dtype(DType::F64)?.to_scalar()?;
            stats.aux_loss = match aux {
                Some(a) => a.to_dtype(DType::F64)?.to_scalar()?,
                None => 0.0,
            };
            match &ranks {
                Some(r) => {
                    let mut sums = metric_sums(&x, &fwd.recon, &fwd.enc.vals)?;
                    sums.extend([stats.loss, stats.aux_loss]);
                    r.sum_f64(&mut sums)?;
                    stats.aux_loss = sums.pop().unwrap_or_default();
                    stats.loss = sums.pop().unwrap_or_default();
                    (stats.mse, stats.fvu, stats.l0) = metrics_of(&sums, batch, x.dim(1)?);
                }
                None => {
                    (stats.mse, stats.fvu) = mse_fvu(&x, &fwd.recon)?;
                    stats.l0 = positive_count(&fwd.enc.vals)? / batch as f64;
                }
            }
            stats.dead_fraction = self.dead.dead()?.1 as f64 / self.sae.shape.n as f64;
            stats.layer_fvu = arch::layer_fvu(&self.sae, &x, &fwd.recon.detach())?;
        }
        Ok(stats)
    }

    /// EMA of the smallest positive kept activation (over the global batch in a group of ranks).
    fn update_threshold(&mut self, vals: &Tensor) -> Result<()> {
        let vals = vals.detach();
        let inf = Tensor::full(f32::INFINITY, vals.shape(), vals.device())?;
        let mut min = if vals.elem_count() == 0 {
            f32::INFINITY
        } else {
            vals.gt(0f64)?
                .where_cond(&vals, &inf)?
                .min(0)?
                .to_scalar::<f32>()?
        };
        if let Some(r) = &self.ranks {
            min = r.min_f32(min)?;
        }
        let min = min as f64;
        if !min.is_finite() {
            return Ok(());
        }
        let beta = self.cfg.sae.threshold.beta;
        self.threshold = if self.threshold < 0.0 {
            min
        } else {
            beta * self.threshold + (1.0 - beta) * min
        };
        Ok(())
    }

    /// Held-out metrics on raw activations [B, L, d]: FVU and L0 with the batch selection and with the
    /// exported threshold.
    pub fn evaluate(&self, raw: &Tensor) -> Result<EvalStats> {
        let x = self.prepare(raw)?;
        let batch = x.dim(0)?;
        let fwd = arch::forward(&self.sae, &x, self.cfg.selector.kind, self.cfg.seed)?;
        let recon = fwd.recon.detach();
        let (mse, fvu) = mse_fvu(&x, &recon)?;
        let l0 = positive_count(&fwd.enc.vals)? / batch as f64;
        let (fvu_threshold, l0_threshold) = if self.threshold >= 0.0 {
            let (r, l0t) = self.sae.reconstruct_threshold(&x, self.threshold)?;
            (mse_fvu(&x, &r)?.1, l0t)
        } else {
            (f64::NAN, f64::NAN)
        };
        let latent_density = latent_density(&fwd.enc.idx, &fwd.enc.vals, batch, self.sae.shape.n)?;
        let rare_fraction = latent_density.iter().filter(|&&d| d < RARE_DENSITY).count() as f64
            / latent_density.len().max(1) as f64;
        let layer_fvu = arch::layer_fvu(&self.sae, &x, &recon)?;
        Ok(EvalStats {
            tokens: batch,
            mse,
            fvu,
            l0,
            fvu_threshold,
            l0_threshold,
            rare_fraction,
            layer_fvu,
            latent_density,
        })
    }
}

/// Held-out evaluation.
#[derive(Clone, Debug, Default, Serialize)]
pub struct EvalStats {
    pub tokens: usize,
    pub mse: f64,
    pub fvu: f64,
    pub l0: f64,
    /// With the exported JumpReLU threshold instead of the batch selection.
    pub fvu_threshold: f64,
    pub l0_threshold: f64,
    /// Fraction of the latents active on fewer than [`RARE_DENSITY`] of the held-out tokens (with fewer
    /// than 1 / RARE_DENSITY tokens: latents never active).
    pub rare_fraction: f64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub layer_fvu: Vec<f64>,
    /// Per latent, the share of the held-out tokens it is active on (kept with a positive value).
    #[serde(skip)]
    pub latent_density: Vec<f64>,
}

/// The density under which a latent counts as rare (the usual "dead or nearly" line of SAE work).
pub const RARE_DENSITY: f64 = 1e-4;

/// Per latent of `n`, the share of the `batch` tokens on which it is kept with a positive value; `idx`
/// are flat indices row · n + col.
fn latent_density(idx: &Tensor, vals: &Tensor, batch: usize, n: usize) -> Result<Vec<f64>> {
    let idx = idx.to_device(&Device::Cpu)?.to_vec1::<i64>()?;
    let vals = vals
        .detach()
        .to_dtype(DType::F32)?
        .to_device(&Device::Cpu)?
        .flatten_all()?
        .to_vec1::<f32>()?;
    let mut count = vec![0usize; n];
    for (&i, &v) in idx.iter().zip(&vals) {
        if v > 0.0 {
            count[i as usize % n] += 1;
        }
    }
    let tokens = batch.max(1) as f64;
    Ok(count.iter().map(|&c| c as f64 / tokens).collect())
}

/// Scales layer l of `raw` [B, L, d] by `scales[l]` and stacks the layers: [B, L·d].
pub fn scale_and_stack(raw: &Tensor, scales: &[f64]) -> Result<Tensor> {
    let (b, l, d) = raw.dims3()?;
    let s: Vec<f32> = scales.iter().map(|v| *v as f32).collect();
    let s = Tensor::from_vec(s, (1, l, 1), raw.device())?;
    Ok(raw.broadcast_mul(&s)?.reshape((b, l * d))?)
}

/// The sums behind a step's metrics, summable over ranks: Σ squared error, Σ‖x‖², the positive
/// kept activations, then Σx per input dimension.
fn metric_sums(x: &Tensor, recon: &Tensor, vals: &Tensor) -> Result<Vec<f64>> {
    let f64s = |t: Tensor| -> Result<Tensor> { Ok(t.to_dtype(DType::F64)?) };
    let err = f64s((x - recon.detach())?.sqr()?.sum_all()?)?.to_scalar::<f64>()?;
    let sq = f64s(x.sqr()?.sum_all()?)?.to_scalar::<f64>()?;
    let mut sums = vec![err, sq, positive_count(vals)?];
    sums.extend(f64s(x.sum(0)?)?.to_vec1::<f64>()?);
    Ok(sums)
}

/// MSE per element, FVU and L0 of a batch of `rows` tokens of `d` inputs from [`metric_sums`]
/// (the variance about the batch mean is Σ‖x‖² − rows·‖mean‖²).
fn metrics_of(sums: &[f64], rows: usize, d: usize) -> (f64, f64, f64) {
    let (err, sq, positive) = (sums[0], sums[1], sums[2]);
    let rows = rows.max(1) as f64;
    let mean_sq: f64 = sums[3..].iter().map(|s| (s / rows) * (s / rows)).sum();
    let var = sq - rows * mean_sq;
    (
        err / (rows * d.max(1) as f64),
        err / var.max(1e-30),
        positive / rows,
    )
}

fn positive_count(vals: &Tensor) -> Result<f64> {
    Ok(vals
        .detach()
        .gt(0f64)?
        .to_dtype(DType::F64)?
        .sum_all()?
        .to_scalar::<f64>()?)
}

/// Milliseconds between successive marks, waiting for the device first (when profiling).
struct Lap {
    on: bool,
    device: Device,
    last: Instant,
}

impl Lap {
    fn new(on: bool, x: &Tensor) -> Self {
        Self {
            on,
            device: x.device().clone(),
            last: Instant::now(),
        }
    }

    fn next(&mut self) -> Result<f64> {
        if !self.on {
            return Ok(0.0);
        }
        self.device.synchronize()?;
        let now = Instant::now();
        let ms = (now - self.last).as_secs_f64() * 1e3;
        self.last = now;
        Ok(ms)
    }
}
