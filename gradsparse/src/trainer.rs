//! One fine-tuning step: forward, causal-LM loss, backward, error feedback, selection, sparse AdamW
//! (or, in dense mode, AdamW on the whole gradient).
use crate::adamw::SparseAdamW;
use crate::config::{FinetuneConfig, Init};
use crate::data::Batches;
use crate::distributed::exchange::{self, Pairs, Segment, Wire};
use crate::distributed::{self, Group};
use crate::error::{Error, Result};
use crate::select::{k_for, Scope, Selection, SelectorChoice};
use crate::{feedback::ErrorFeedback, layout::FlatLayout, mass::sum_of_squares};
use candle_core::{DType, Device, Tensor, Var};
use candle_nn::VarMap;
use collective::GradientExchange;
use gpt2::{Gpt2, Gpt2Config};
use std::time::{Duration, Instant};

/// What one step did and how long each stage took (device synchronized between stages).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepReport {
    /// 0-based index of the step that ran.
    pub step: u64,
    pub loss: f32,
    pub lr: f64,
    pub density: f64,
    /// Coordinates applied this step.
    pub k: usize,
    pub tokens: u64,
    /// Forward, loss and backward.
    pub forward_backward: Duration,
    /// Residual update `r += g` (and the velocity with momentum correction).
    pub accumulate: Duration,
    /// Top-k selection by the primary selector.
    pub select: Duration,
    /// The compare-mode selector, when it ran (not part of `total`'s selection share).
    pub compare: Option<Duration>,
    /// Zeroing the applied residual coordinates and the sparse AdamW update.
    pub apply: Duration,
    pub total: Duration,
    /// The error feedback's state after the step, when the step was asked to measure it.
    pub feedback: Option<FeedbackStats>,
    /// What this rank put on the wire (data-parallel runs only).
    pub wire: Option<Wire>,
    /// The weights' hash after the step, every `distributed.hash_every` steps of a data-parallel
    /// run (checked equal on every rank).
    pub weights_hash: Option<u64>,
}

/// How much of the accumulated gradient a step applied and how much it carried over.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FeedbackStats {
    /// L2 norm of the residual after the selected coordinates left it (0 in dense mode).
    pub residual_norm: f64,
    /// Share of the accumulated gradient's squared L2 mass that the selection applied:
    /// Σ selected v² / Σ all v² (1 in dense mode, and when the accumulated gradient is zero).
    pub kept_share: f64,
}

impl FeedbackStats {
    /// From the accumulated gradient's squared mass before the selection, the selected part of it,
    /// and the residual's squared mass after.
    fn from_masses(total: f64, kept: f64, residual: f64) -> Self {
        Self {
            residual_norm: residual.sqrt(),
            kept_share: if total > 0.0 { kept / total } else { 1.0 },
        }
    }
}

impl StepReport {
    /// Error-feedback overhead: residual update, selection and sparse apply.
    pub fn overhead(&self) -> Duration {
        self.accumulate + self.select + self.apply
    }
}

/// A GPT-2 under error-feedback sparsified AdamW.
pub struct Trainer {
    cfg: FinetuneConfig,
    model: Gpt2,
    vars: Vec<Var>,
    feedback: ErrorFeedback,
    optimizer: SparseAdamW,
    batches: Batches,
    choice: SelectorChoice,
    device: Device,
    step: u64,
    group: Option<Group>,
    // Keeps the variables registered under their names (the model and `vars` share them).
    _varmap: VarMap,
}

/// The device a config's `device` names.
pub fn device_of(spec: runtime::config::DeviceSpec) -> Result<Device> {
    runtime::device::open_device("device", spec).map_err(|e| match e {
        runtime::Error::Config { key, message } => Error::Config { key, message },
        other => Error::config("device", other.to_string()),
    })
}

/// The model a config describes: random weights of a named size, or loaded weights.
pub fn build_model(cfg: &FinetuneConfig, device: &Device) -> Result<Gpt2> {
    let m = &cfg.model;
    let model = match m.init {
        Init::Random => {
            let size = Gpt2Config::by_name(&m.name)
                .ok_or_else(|| Error::config("model.name", format!("unknown size {:?}", m.name)))?;
            Gpt2::random(size, cfg.seed, DType::F32, device)
        }
        Init::Load => Gpt2::load(&m.name, DType::F32, device),
    };
    model.map_err(|e| Error::config("model.name", e.to_string()))
}

impl Trainer {
    /// A trainer starting from `model` (its weights are copied into trainable variables).
    pub fn new(cfg: FinetuneConfig, model: &Gpt2, batches: Batches) -> Result<Self> {
        Self::with_group(cfg, model, batches, None)
    }

    /// A trainer that is one rank of `group` (data-parallel: its own micro-batches, its own
    /// residual, the update shared by `group.exchange`); `None` trains alone. Every rank starts
    /// from the same `model`.
    pub fn with_group(
        cfg: FinetuneConfig,
        model: &Gpt2,
        batches: Batches,
        group: Option<Group>,
    ) -> Result<Self> {
        let device = model.device().clone();
        #[cfg(feature = "cuda")]
        if device.is_cuda() {
            candle_core::cuda::set_gemm_reduced_precision_f32(cfg.model.tf32);
            // Freed memory stays in the pool, as in PyTorch's caching allocator; otherwise every
            // step's synchronisation unmaps it and the next step maps it again.
            gpt2::ops::keep_pool_memory(&device).map_err(Error::Candle)?;
        }
        let varmap = VarMap::new();
        let model = model.to_varmap(&varmap).map_err(|e| Error::Param {
            name: "<model>".into(),
            message: e.to_string(),
        })?;
        let named: Vec<(String, Var)> = {
            let data = varmap.data().lock().map_err(|_| Error::Param {
                name: "<varmap>".into(),
                message: "lock poisoned".into(),
            })?;
            data.iter().map(|(n, v)| (n.clone(), v.clone())).collect()
        };
        let layout = FlatLayout::new(&named)?;
        if group.is_some() && u32::try_from(layout.total()).is_err() {
            return Err(Error::config(
                "distributed.mode",
                format!(
                    "{} parameters: the exchanges address coordinates with 32 bits",
                    layout.total()
                ),
            ));
        }
        let vars: Vec<Var> = layout
            .spans()
            .iter()
            .map(|s| {
                named
                    .iter()
                    .find(|(n, _)| n == &s.name)
                    .map(|(_, v)| v.clone())
                    .expect("layout built from these names")
            })
            .collect();
        let momentum = momentum_correction(&cfg).then_some(cfg.sparsify.momentum);
        let feedback = ErrorFeedback::new(layout.clone(), momentum, &device)?;
        let optimizer = SparseAdamW::new(cfg.adamw(), layout.total(), &device)?;
        let choice = SelectorChoice {
            kind: cfg.selector.kind,
            compare_with: cfg.selector.compare_with(),
        };
        Ok(Self {
            cfg,
            model,
            vars,
            feedback,
            optimizer,
            batches,
            choice,
            device,
            step: 0,
            group,
            _varmap: varmap,
        })
    }

    pub fn config(&self) -> &FinetuneConfig {
        &self.cfg
    }

    pub fn model(&self) -> &Gpt2 {
        &self.model
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The group this trainer is a rank of, if any.
    pub fn group(&self) -> Option<&Group> {
        self.group.as_ref()
    }

    /// Switches the selector (benchmarks compare selectors on one trainer).
    pub fn set_selector(&mut self, choice: SelectorChoice) {
        self.choice = choice;
    }

    /// Completed steps.
    pub fn step_count(&self) -> u64 {
        self.step
    }

    pub fn layout(&self) -> &FlatLayout {
        self.feedback.layout()
    }

    pub fn feedback(&self) -> &ErrorFeedback {
        &self.feedback
    }

    pub(crate) fn feedback_mut(&mut self) -> &mut ErrorFeedback {
        &mut self.feedback
    }

    pub fn optimizer(&self) -> &SparseAdamW {
        &self.optimizer
    }

    pub(crate) fn optimizer_mut(&mut self) -> &mut SparseAdamW {
        &mut self.optimizer
    }

    pub(crate) fn set_step_count(&mut self, step: u64) {
        self.step = step;
    }

    /// The trainable variables in layout order.
    pub fn vars(&self) -> &[Var] {
        &self.vars
    }

    /// Coordinates a step at `density` applies (all of them in dense mode).
    pub fn k_at(&self, density: f64) -> usize {
        let layout = self.layout();
        if self.cfg.is_dense() {
            return layout.total();
        }
        match self.cfg.sparsify.scope {
            Scope::Global => k_for(density, layout.total()),
            Scope::PerTensor => layout.spans().iter().map(|s| k_for(density, s.len)).sum(),
        }
    }

    fn sync(&self) -> Result<Instant> {
        self.device.synchronize()?;
        Ok(Instant::now())
    }

    /// Runs one training step.
    pub fn train_step(&mut self) -> Result<StepReport> {
        self.step_measured(false)
    }

    /// Runs one training step and measures the error feedback's state after it
    /// ([`StepReport::feedback`]): two more passes over the residual.
    pub fn train_step_with_stats(&mut self) -> Result<StepReport> {
        self.step_measured(true)
    }

    fn step_measured(&mut self, stats: bool) -> Result<StepReport> {
        let step = self.step;
        let (rank, world) = self
            .group
            .as_ref()
            .map_or((0, 1), |g| (g.rank(), g.world()));
        let tokens = self.batches.rank_batch(step, rank, world, &self.device)?;
        let start = self.sync()?;
        let loss = self.model.forward_loss(&tokens).map_err(candle_of)?;
        // Checked before the backward pass, which adds into the residual through the sinks.
        let loss_value = loss.to_scalar::<f32>()?;
        if !loss_value.is_finite() {
            return Err(Error::NonFinite {
                step,
                loss: loss_value,
            });
        }
        let grads = {
            let _sinks = self.gradient_sinks()?;
            loss.backward()?
        };
        let after_backward = self.sync()?;

        // None: nothing to add (added through a sink, or no gradient); momentum correction needs
        // every gradient, zeros included.
        let momentum = momentum_correction(&self.cfg);
        let grads: Vec<Option<Tensor>> = self
            .vars
            .iter()
            .zip(self.layout().spans())
            .map(|(var, span)| match grads.get(var) {
                Some(g) => Ok(Some(g.clone())),
                None if momentum => {
                    Tensor::zeros(span.shape.clone(), DType::F32, &self.device).map(Some)
                }
                None => Ok(None),
            })
            .collect::<candle_core::Result<_>>()?;
        let lr = self.cfg.lr_at(step);
        let exchange = self.group.as_ref().map(|g| g.exchange);
        let applied = match exchange {
            Some(GradientExchange::Dense) => self.all_reduced_update(&grads, step, lr, stats)?,
            _ if self.cfg.is_dense() => self.dense_update(&grads, lr)?,
            _ => self.sparse_update(grads, step, lr, stats)?,
        };
        let end = self.sync()?;
        self.step += 1;
        let weights_hash = self.check_weights()?;
        Ok(StepReport {
            step,
            loss: loss_value,
            lr,
            density: applied.density,
            k: applied.k,
            tokens: tokens.elem_count() as u64,
            forward_backward: after_backward - start,
            accumulate: applied.accumulate,
            select: applied.select,
            compare: applied.compare,
            apply: applied.apply,
            total: end - start,
            feedback: applied.feedback,
            wire: applied.wire,
            weights_hash,
        })
    }

    /// Every `distributed.hash_every` steps of a data-parallel run: the weights' hash, checked
    /// equal on every rank.
    fn check_weights(&self) -> Result<Option<u64>> {
        let every = self.cfg.distributed.hash_every as u64;
        let Some(group) = &self.group else {
            return Ok(None);
        };
        if every == 0 || !self.step.is_multiple_of(every) {
            return Ok(None);
        }
        let hash = distributed::weights_hash(&self.vars)?;
        distributed::check_hashes(group.collective(), self.step, hash)?;
        Ok(Some(hash))
    }

    /// Bytes of the `dense` exchange: the f32 residual, and the velocity with momentum correction.
    fn dense_bytes(&self) -> u64 {
        let buffers = 1 + self.feedback.velocity().is_some() as u64;
        4 * self.layout().total() as u64 * buffers
    }

    /// The `dense` exchange: this step's gradients go into the residual (identical on every rank
    /// before the step), whose mean over the ranks (and the velocity's) every rank then holds; the
    /// update is then that of one process, dense AdamW or error feedback.
    fn all_reduced_update(
        &mut self,
        grads: &[Option<Tensor>],
        step: u64,
        lr: f64,
        stats: bool,
    ) -> Result<Applied> {
        let group = self
            .group
            .clone()
            .ok_or_else(|| Error::Distributed("the dense exchange without a group".into()))?;
        let start = self.sync()?;
        self.feedback.accumulate(grads)?;
        let accumulated = self.sync()?;
        let collective = self.all_reduce_feedback(&group)?;
        let wire = Wire {
            sent: self.dense_bytes(),
            dense: self.dense_bytes(),
            collective,
        };
        let mut applied = if self.cfg.is_dense() {
            let before = self.sync()?;
            self.optimizer
                .apply_dense(&self.vars, &mut self.feedback, lr)?;
            Applied {
                density: 1.0,
                k: self.layout().total(),
                accumulate: Duration::ZERO,
                select: Duration::ZERO,
                compare: None,
                apply: self.sync()? - before,
                feedback: Some(FeedbackStats {
                    residual_norm: 0.0,
                    kept_share: 1.0,
                }),
                wire: None,
            }
        } else {
            let density = self.cfg.density_at(step);
            let choice = self.choice_at(step);
            let selection =
                self.feedback
                    .select(density, self.cfg.sparsify.scope, &choice, step)?;
            self.apply_own(selection, density, lr, stats)?
        };
        applied.accumulate = accumulated - start;
        applied.wire = Some(wire);
        Ok(applied)
    }

    /// The residual's (and velocity's) mean over the ranks, in place; the time in the collective.
    fn all_reduce_feedback(&mut self, group: &Group) -> Result<Duration> {
        #[cfg(feature = "cuda")]
        if let (Some(nccl), true) = (group.nccl_comm(), self.device.is_cuda()) {
            let start = self.sync()?;
            distributed::device::all_reduce_mean(nccl, self.feedback.residual())?;
            if let Some(v) = self.feedback.velocity() {
                distributed::device::all_reduce_mean(nccl, v)?;
            }
            return Ok(self.sync()? - start);
        }
        let mut took = Duration::ZERO;
        let mut mean = |t: &Tensor| -> Result<Tensor> {
            let mut host = t.to_vec1::<f32>()?;
            took += exchange::dense_mean(group.collective(), &mut host)?;
            Ok(Tensor::from_vec(host, t.elem_count(), &self.device)?)
        };
        let residual = mean(self.feedback.residual())?;
        let velocity = self.feedback.velocity().map(&mut mean).transpose()?;
        self.feedback.restore(residual, velocity)?;
        Ok(took)
    }

    /// The selectors of step `step`: the second one every `selector.compare_every` steps.
    fn choice_at(&self, step: u64) -> SelectorChoice {
        let compares = self.cfg.selector.comparison_due(step);
        SelectorChoice {
            kind: self.choice.kind,
            compare_with: self.choice.compare_with.filter(|_| compares),
        }
    }

    /// Error feedback: accumulate into the residual, select its top, apply that.
    fn sparse_update(
        &mut self,
        grads: Vec<Option<Tensor>>,
        step: u64,
        lr: f64,
        stats: bool,
    ) -> Result<Applied> {
        let density = self.cfg.density_at(step);
        let choice = self.choice_at(step);
        let selection = self.feedback.accumulate_select(
            &grads,
            density,
            self.cfg.sparsify.scope,
            &choice,
            step,
        )?;
        drop(grads);
        let Some(group) = self.group.clone() else {
            return self.apply_own(selection, density, lr, stats);
        };
        let mine = host_pairs(&selection)?;
        let (update, mut wire) = match group.exchange {
            GradientExchange::Global => {
                exchange::global_topk(group.collective(), &mine, &self.segments(density))?
            }
            _ => exchange::sparse_mean(group.collective(), &mine)?,
        };
        wire.dense = self.dense_bytes();
        let mut applied = if update.indices == mine.indices {
            // What this rank sent is what the update applies: released in the fused apply.
            let update = self.device_selection(&update, &selection)?;
            self.apply_own(update, density, lr, stats)?
        } else {
            let share = exchange::applied_share(&mine, &update);
            let share = self.device_selection(&share, &selection)?;
            let update = self.device_selection(&update, &selection)?;
            self.apply_shared(update, share, density, lr, stats)?
        };
        applied.wire = Some(wire);
        Ok(applied)
    }

    /// The coordinates a cut keeps, per segment: one for a global selection, one per tensor.
    fn segments(&self, density: f64) -> Vec<Segment> {
        let layout = self.layout();
        let segment = |start: usize, len: usize| Segment {
            start: start as u32,
            end: (start + len) as u32,
            k: k_for(density, len),
        };
        match self.cfg.sparsify.scope {
            Scope::Global => vec![segment(0, layout.total())],
            Scope::PerTensor => layout
                .spans()
                .iter()
                .map(|s| segment(s.offset, s.len))
                .collect(),
        }
    }

    /// `pairs` as a selection on the device, with the times of `like`.
    fn device_selection(&self, pairs: &Pairs, like: &Selection) -> Result<Selection> {
        let indices: Vec<i64> = pairs.indices.iter().map(|&i| i as i64).collect();
        Ok(Selection {
            indices: Tensor::from_vec(indices, pairs.len(), &self.device)?,
            values: Tensor::from_vec(pairs.values.clone(), pairs.len(), &self.device)?,
            time: like.time,
            compare_time: like.compare_time,
            accumulate: like.accumulate,
        })
    }

    /// Applies `selection`, taking its coordinates out of this rank's residual (fused on CUDA).
    fn apply_own(
        &mut self,
        selection: Selection,
        density: f64,
        lr: f64,
        stats: bool,
    ) -> Result<Applied> {
        // Before the apply takes the selected coordinates out of the residual; not timed.
        let masses = self.masses(stats, &selection)?;
        let before_apply = self.sync()?;
        self.optimizer
            .apply_selection(&self.vars, &mut self.feedback, &selection, lr)?;
        let apply = self.sync()? - before_apply;
        let feedback = self.feedback_stats(masses)?;
        Ok(Applied::of(selection, density, apply, feedback))
    }

    /// Applies the shared `update` and takes this rank's `share` of it out of its residual: what it
    /// sent but the update does not apply stays there.
    fn apply_shared(
        &mut self,
        update: Selection,
        share: Selection,
        density: f64,
        lr: f64,
        stats: bool,
    ) -> Result<Applied> {
        let masses = self.masses(stats, &share)?;
        let before_apply = self.sync()?;
        self.feedback.release(&share)?;
        let layout = self.layout().clone();
        self.optimizer
            .apply(&self.vars, &layout, &update.indices, &update.values, lr)?;
        let apply = self.sync()? - before_apply;
        let feedback = self.feedback_stats(masses)?;
        Ok(Applied::of(update, density, apply, feedback))
    }

    /// The accumulated gradient's squared mass and the part `leaving` takes, when measured.
    fn masses(&self, stats: bool, leaving: &Selection) -> Result<Option<(f64, f64)>> {
        stats
            .then(|| -> Result<(f64, f64)> {
                Ok((
                    sum_of_squares(self.feedback.residual())?,
                    sum_of_squares(&leaving.values)?,
                ))
            })
            .transpose()
    }

    fn feedback_stats(&self, masses: Option<(f64, f64)>) -> Result<Option<FeedbackStats>> {
        masses
            .map(|(total, kept)| -> Result<FeedbackStats> {
                let residual = sum_of_squares(self.feedback.residual())?;
                Ok(FeedbackStats::from_masses(total, kept, residual))
            })
            .transpose()
    }

    /// Dense mode: plain AdamW on the whole gradient, gathered in the (then cleared) residual.
    fn dense_update(&mut self, grads: &[Option<Tensor>], lr: f64) -> Result<Applied> {
        let start = self.sync()?;
        self.feedback.accumulate(grads)?;
        let accumulated = self.sync()?;
        self.optimizer
            .apply_dense(&self.vars, &mut self.feedback, lr)?;
        let applied = self.sync()?;
        Ok(Applied {
            density: 1.0,
            k: self.layout().total(),
            accumulate: accumulated - start,
            select: Duration::ZERO,
            compare: None,
            apply: applied - accumulated,
            feedback: Some(FeedbackStats {
                residual_norm: 0.0,
                kept_share: 1.0,
            }),
            wire: None,
        })
    }

    /// Without momentum correction every variable's gradient may go straight into its span of the
    /// residual: the ops that support it (the linear layers' weight-gradient products, nearly all of
    /// GPT-2's coordinates) add into the residual in place and return no gradient, so no gradient
    /// tensor is written, accumulated by candle, and read again by the update pass. The others return
    /// theirs as usual. With momentum correction `u = μ·u + g` comes first, so every gradient is returned.
    fn gradient_sinks(&self) -> Result<Option<gpt2::ops::SinkGuard>> {
        if momentum_correction(&self.cfg) {
            return Ok(None);
        }
        let residual = self.feedback.residual();
        let targets = self
            .vars
            .iter()
            .zip(self.layout().spans())
            .filter(|(var, _)| var.dtype() == DType::F32 && var.is_contiguous())
            .map(|(var, span)| {
                (
                    var.as_tensor(),
                    gpt2::ops::GradSink {
                        buffer: residual.clone(),
                        offset: span.offset,
                    },
                )
            });
        Ok(Some(gpt2::ops::sink_gradients(targets)?))
    }

    /// Mean next-token loss per predicted token over `max_contexts` held-out contexts spread over
    /// the held-out documents (None without eval data).
    pub fn eval_loss(&self, max_contexts: usize) -> Result<Option<f32>> {
        let batches = self.batches.eval_batches(max_contexts, &self.device)?;
        if batches.is_empty() {
            return Ok(None);
        }
        let (mut sum, mut count) = (0f64, 0usize);
        for tokens in &batches {
            let (b, t) = tokens.dims2()?;
            let rows = b * (t - 1);
            sum += self
                .model
                .forward_loss_no_grad(tokens)
                .map_err(candle_of)?
                .to_scalar::<f32>()? as f64
                * rows as f64;
            count += rows;
        }
        Ok(Some((sum / count as f64) as f32))
    }
}

/// Model errors surface as candle errors with their message.
fn candle_of(e: gpt2::Error) -> candle_core::Error {
    candle_core::Error::Msg(e.to_string())
}

/// Whether steps accumulate the DGC velocity (never in dense mode, which has no error feedback).
fn momentum_correction(cfg: &FinetuneConfig) -> bool {
    !cfg.is_dense() && cfg.sparsify.momentum_correction
}

/// What the update part of a step did.
struct Applied {
    density: f64,
    k: usize,
    accumulate: Duration,
    select: Duration,
    compare: Option<Duration>,
    apply: Duration,
    feedback: Option<FeedbackStats>,
    wire: Option<Wire>,
}

impl Applied {
    fn of(
        selection: Selection,
        density: f64,
        apply: Duration,
        feedback: Option<FeedbackStats>,
    ) -> Self {
        Self {
            density,
            k: selection.k(),
            accumulate: selection.accumulate,
            select: selection.time,
            compare: selection.compare_time,
            apply,
            feedback,
            wire: None,
        }
    }
}

/// A selection's coordinates and values on the host, for the exchange.
fn host_pairs(selection: &Selection) -> Result<Pairs> {
    let indices = selection.indices.to_dtype(DType::I64)?.to_vec1::<i64>()?;
    Ok(Pairs {
        indices: indices.into_iter().map(|i| i as u32).collect(),
        values: selection.values.to_dtype(DType::F32)?.to_vec1::<f32>()?,
    })
}
