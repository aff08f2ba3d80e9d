//! AdamW applied to selected coordinates only ("lazy" AdamW, as torch's SparseAdam and DGC use it).
//!
//! Semantics: the moments `m`, `v` are dense flat f32 buffers, but a step reads and writes them only at
//! the selected coordinates; unselected coordinates keep their parameter, moments and weight (no decay,
//! no moment decay). The bias correction uses the global step count t, so on the coordinates selected
//! every step this is exactly candle-nn's dense AdamW:
//! `m ← β1·m + (1−β1)·g`, `v ← β2·v + (1−β2)·g²`, `θ ← θ·(1 − lr·λ) − lr·m̂ / (√v̂ + ε)`.
use crate::error::Result;
use crate::feedback::ErrorFeedback;
use crate::flatops;
use crate::layout::FlatLayout;
use crate::select::Selection;
use candle_core::{DType, Device, Tensor, Var};
use serde::{Deserialize, Serialize};

/// AdamW hyperparameters (candle-nn's defaults).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdamWParams {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl Default for AdamWParams {
    fn default() -> Self {
        Self {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
        }
    }
}

/// Moments and step count of the sparse AdamW.
#[derive(Debug)]
pub struct SparseAdamW {
    params: AdamWParams,
    m: Tensor,
    v: Tensor,
    step: u64,
}

impl SparseAdamW {
    pub fn new(params: AdamWParams, total: usize, device: &Device) -> Result<Self> {
        Ok(Self {
            params,
            m: Tensor::zeros(total, DType::F32, device)?,
            v: Tensor::zeros(total, DType::F32, device)?,
            step: 0,
        })
    }

    pub fn step_count(&self) -> u64 {
        self.step
    }

    pub fn moments(&self) -> (&Tensor, &Tensor) {
        (&self.m, &self.v)
    }

    /// Restores saved moments and step count.
    pub fn restore(&mut self, m: Tensor, v: Tensor, step: u64) -> Result<()> {
        let device = self.m.device().clone();
        self.m = m.to_dtype(DType::F32)?.to_device(&device)?.copy()?;
        self.v = v.to_dtype(DType::F32)?.to_device(&device)?.copy()?;
        self.step = step;
        Ok(())
    }

    /// Takes the selected coordinates out of the error-feedback state and applies them: on CUDA one
    /// fused launch, on the CPU [`ErrorFeedback::release`] then [`SparseAdamW::apply`].
    pub fn apply_selection(
        &mut self,
        vars: &[Var],
        feedback: &mut ErrorFeedback,
        selection: &Selection,
        lr: f64,
    ) -> Result<()> {
        #[cfg(feature = "cuda")]
        if self.m.device().is_cuda() {
            self.step += 1;
            let t = self.step as i32;
            let p = &self.params;
            let params: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
            let state = crate::cuda::ApplyState {
                residual: feedback.residual(),
                velocity: feedback.velocity(),
                m: &self.m,
                v: &self.v,
                params: &params,
                layout: feedback.layout(),
            };
            let step = crate::cuda::ApplyStep {
                beta1: p.beta1,
                beta2: p.beta2,
                scale_m: 1.0 / (1.0 - p.beta1.powi(t)),
                scale_v: 1.0 / (1.0 - p.beta2.powi(t)),
                eps: p.eps,
                lr,
                weight_decay: p.weight_decay,
            };
            return crate::cuda::sparse_apply(&state, &selection.indices, &selection.values, &step);
        }
        feedback.release(selection)?;
        let layout = feedback.layout().clone();
        self.apply(vars, &layout, &selection.indices, &selection.values, lr)
    }

    /// Plain AdamW on the dense gradient (`sparsify.mode = "dense"`): the whole residual, into which
    /// this step's gradients were accumulated, is applied and the residual cleared. The same update
    /// as [`Self::apply_selection`] selecting every coordinate.
    pub fn apply_dense(
        &mut self,
        vars: &[Var],
        feedback: &mut ErrorFeedback,
        lr: f64,
    ) -> Result<()> {
        self.step += 1;
        let AdamWParams {
            beta1,
            beta2,
            eps,
            weight_decay,
        } = self.params;
        let t = self.step as i32;
        let (scale_m, scale_v) = (1.0 / (1.0 - beta1.powi(t)), 1.0 / (1.0 - beta2.powi(t)));
        let grad = feedback.residual();
        self.m = ((&self.m * beta1)? + (grad * (1.0 - beta1))?)?;
        self.v = ((&self.v * beta2)? + (grad.sqr()? * (1.0 - beta2))?)?;
        let update = ((&self.m * scale_m)? / ((&self.v * scale_v)?.sqrt()? + eps)?)?;
        for (span, var) in feedback.layout().spans().iter().zip(vars) {
            let upd = update
                .narrow(0, span.offset, span.len)?
                .reshape(span.shape.clone())?;
            let theta = var.as_tensor().to_dtype(DType::F32)?;
            let next = ((theta * (1.0 - lr * weight_decay))? - (upd * lr)?)?;
            var.set(&next.to_dtype(var.dtype())?)?;
        }
        feedback.clear()
    }

    /// Applies gradient values `grad` (f32, [k]) at the ascending flat `indices` (i64, [k]) of
    /// `vars` (in `layout` order), with learning rate `lr`.
    pub fn apply(
        &mut self,
        vars: &[Var],
        layout: &FlatLayout,
        indices: &Tensor,
        grad: &Tensor,
        lr: f64,
    ) -> Result<()> {
        self.step += 1;
        let AdamWParams {
            beta1,
            beta2,
            eps,
            weight_decay,
        } = self.params;
        let t = self.step as i32;
        let (scale_m, scale_v) = (1.0 / (1.0 - beta1.powi(t)), 1.0 / (1.0 - beta2.powi(t)));
        if indices.elem_count() == 0 {
            return Ok(());
        }
        let grad = grad.to_dtype(DType::F32)?;
        let m = ((self.m.index_select(indices, 0)? * beta1)? + (&grad * (1.0 - beta1))?)?;
        let v = ((self.v.index_select(indices, 0)? * beta2)? + (grad.sqr()? * (1.0 - beta2))?)?;
        let update = ((&m * scale_m)? / ((&v * scale_v)?.sqrt()? + eps)?)?;
        flatops::scatter_into(&self.m, indices, &m)?;
        flatops::scatter_into(&self.v, indices, &v)?;

        let host: Vec<i64> = indices.to_vec1()?;
        for ((span, range), var) in layout.spans().iter().zip(layout.partition(&host)).zip(vars) {
            if range.is_empty() {
                continue;
            }
            let offset = Tensor::new(span.offset as i64, indices.device())?;
            let local = indices
                .narrow(0, range.start, range.len())?
                .broadcast_sub(&offset)?;
            let upd = update.narrow(0, range.start, range.len())?;
            let flat = var.as_tensor().flatten_all()?;
            let theta = flat.index_select(&local, 0)?.to_dtype(DType::F32)?;
            let next = ((theta * (1.0 - lr * weight_decay))? - (upd * lr)?)?;
            flatops::scatter_into(&flat, &local, &next)?;
        }
        Ok(())
    }
}
