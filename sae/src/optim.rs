//! Adam with linear warm-up and linear decay, global gradient-norm clipping, and the unit-norm decoder
//! constraint: the decoder gradient loses its component parallel to each row before the step, and the rows
//! are renormalized after it.
use crate::config::TrainConfig;
use crate::model::Sae;
use crate::Result;
use candle_core::{backprop::GradStore, DType, Tensor, Var};

/// First and second moments of every parameter, in the order of [`crate::model::Sae::vars`], stored
/// in f32 or bf16 (`train.moments`).
pub struct Adam {
    pub m: Vec<Tensor>,
    pub v: Vec<Tensor>,
    /// Steps taken.
    pub t: u64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
}

impl Adam {
    pub fn new(vars: &[&Var], cfg: &TrainConfig) -> Result<Self> {
        let dtype = cfg.moments.dtype();
        let zeros = |v: &&Var| v.as_tensor().zeros_like()?.to_dtype(dtype);
        Ok(Self {
            m: vars.iter().map(zeros).collect::<candle_core::Result<_>>()?,
            v: vars.iter().map(zeros).collect::<candle_core::Result<_>>()?,
            t: 0,
            beta1: cfg.beta1,
            beta2: cfg.beta2,
            eps: cfg.eps,
        })
    }

    /// The whole update from the raw gradients (in the order of [`Sae::vars`]): the decoder gradient
    /// loses its component along each decoder row, all gradients are clipped to a global norm of
    /// `clip` (0: no clipping), Adam steps, and the decoder rows are renormalized. Returns the gradient
    /// norm before clipping. On CUDA this is two launches over all parameters (the gradients'
    /// statistics, then Adam with the projection and renormalization folded in), in place.
    pub fn update(&mut self, sae: &Sae, mut grads: Vec<Tensor>, clip: f64, lr: f64) -> Result<f64> {
        let vars = sae.vars();
        #[cfg(feature = "cuda")]
        if sae.device().is_cuda() {
            return self.update_cuda(&vars, &grads, clip, lr);
        }
        grads[DECODER] = project_decoder_grad(sae.w_dec.as_tensor(), &grads[DECODER])?;
        let norm = clip_global_norm(&mut grads, clip)?;
        self.step(&vars, &grads, lr)?;
        normalize_rows(&sae.w_dec)?;
        Ok(norm)
    }

    #[cfg(feature = "cuda")]
    fn update_cuda(&mut self, vars: &[&Var], grads: &[Tensor], clip: f64, lr: f64) -> Result<f64> {
        use crate::cuda;
        let grads: Vec<Tensor> = grads
            .iter()
            .map(|g| g.contiguous())
            .collect::<candle_core::Result<_>>()?;
        self.t += 1;
        let h = cuda::AdamStep {
            beta1: self.beta1,
            beta2: self.beta2,
            bc1: 1.0 - self.beta1.powi(self.t as i32),
            bc2: 1.0 - self.beta2.powi(self.t as i32),
            eps: self.eps,
            lr,
        };
        let params: Vec<[&Tensor; 4]> = vars
            .iter()
            .zip(&grads)
            .zip(self.m.iter().zip(&self.v))
            .map(|((p, g), (m, v))| [p.as_tensor(), g, m, v])
            .collect();
        Ok(cuda::adam_fused(&params, DECODER, clip, &h)?)
    }

    /// One update of every var with its gradient in `grads` (already clipped / projected); the moments
    /// are computed in f32 and stored in their dtype.
    pub fn step(&mut self, vars: &[&Var], grads: &[Tensor], lr: f64) -> Result<()> {
        self.t += 1;
        let bc1 = 1.0 - self.beta1.powi(self.t as i32);
        let bc2 = 1.0 - self.beta2.powi(self.t as i32);
        for (i, (var, g)) in vars.iter().zip(grads).enumerate() {
            let g = g.detach();
            let stored = self.m[i].dtype();
            let m = ((self.m[i].to_dtype(DType::F32)? * self.beta1)? + (&g * (1.0 - self.beta1))?)?;
            let v = ((self.v[i].to_dtype(DType::F32)? * self.beta2)?
                + (g.sqr()? * (1.0 - self.beta2))?)?;
            let denom = ((&v / bc2)?.sqrt()? + self.eps)?;
            let update = ((&m / bc1)? / denom)?;
            var.set(&(var.as_tensor() - (update * lr)?)?)?;
            self.m[i] = m.to_dtype(stored)?.detach();
            self.v[i] = v.to_dtype(stored)?.detach();
        }
        Ok(())
    }
}

/// Position of the decoder (projected and renormalized) in [`Sae::vars`].
const DECODER: usize = 2;

/// Learning rate at `step` (0-based): linear warm-up over `warmup_steps`, constant, then linear decay to 0
/// from `decay_start · steps` to the end.
pub fn lr_at(step: u64, base: f64, cfg: &TrainConfig) -> f64 {
    let s = step as f64;
    let warm = if cfg.warmup_steps > 0 {
        ((s + 1.0) / cfg.warmup_steps as f64).min(1.0)
    } else {
        1.0
    };
    let total = cfg.steps as f64;
    let decay_from = cfg.decay_start * total;
    let decay = if cfg.decay_start < 1.0 && s >= decay_from {
        ((total - s) / (total - decay_from)).clamp(0.0, 1.0)
    } else {
        1.0
    };
    base * warm * decay
}

/// Gradients of the parameters in the order of [`Sae::vars`] (zeros where one got none), from the
/// gradient store and the model's weight sinks.
pub fn collect_grads(sae: &Sae, grads: &GradStore) -> Result<Vec<Tensor>> {
    let sinks = sae.sinks.clone().unwrap_or_default();
    let sunk = [sinks.w_enc.take()?, None, sinks.w_dec.take()?, None];
    sae.vars()
        .iter()
        .zip(sunk)
        .map(|(v, sunk)| {
            // Detached: a gradient computed from tracked tensors would chain every step's graph into
            // the Adam moments.
            let stored = grads.get(v.as_tensor()).map(|g| g.detach());
            Ok(match (stored, sunk) {
                (Some(a), Some(b)) => (a + b)?,
                (Some(g), None) | (None, Some(g)) => g,
                (None, None) => v.as_tensor().zeros_like()?,
            })
        })
        .collect()
}

/// Removes from the decoder gradient [n, d] its component along each (unit) decoder row.
pub fn project_decoder_grad(w_dec: &Tensor, grad: &Tensor) -> Result<Tensor> {
    let parallel = (grad * w_dec)?.sum_keepdim(1)?;
    Ok((grad - w_dec.broadcast_mul(&parallel)?)?)
}

/// Rescales every decoder row to unit norm.
pub fn normalize_rows(w_dec: &Var) -> Result<()> {
    let w = w_dec.as_tensor();
    let norm = w.sqr()?.sum_keepdim(1)?.sqrt()?.clamp(1e-12, f64::MAX)?;
    w_dec.set(&w.broadcast_div(&norm)?)?;
    Ok(())
}

/// Scales all gradients so that their global L2 norm is at most `max_norm` (0: no clipping). Returns the norm
/// before clipping.
pub fn clip_global_norm(grads: &mut [Tensor], max_norm: f64) -> Result<f64> {
    let mut sq = 0f64;
    for g in grads.iter() {
        sq += g
            .sqr()?
            .sum_all()?
            .to_dtype(candle_core::DType::F64)?
            .to_scalar::<f64>()?;
    }
    let norm = sq.sqrt();
    if max_norm > 0.0 && norm > max_norm {
        let scale = max_norm / norm;
        for g in grads.iter_mut() {
            *g = (&*g * scale)?;
        }
    }
    Ok(norm)
}
