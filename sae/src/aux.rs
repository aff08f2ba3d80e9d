//! Aux-k loss (Gao et al. 2024): the `k_aux` largest pre-activations of each token among the dead latents
//! reconstruct the residual error `e = x − recon` (detached); the loss is normalized by the variance of `e`.
//! It gives dead latents a gradient toward the directions the live ones miss.
use crate::aux_dense::{dead_columns_loss, flops_per_byte, prefer_dense};
use crate::config::AuxDecode;
use crate::distributed::BatchShare;
use crate::model::{Encoded, Sae};
use crate::select::select_rows;
use crate::sparse::{dense_decode, fired_latents};
use crate::Result;
use candle_core::{DType, Tensor};

/// Tokens since each latent last fired, and the dead set derived from it.
pub struct DeadTracker {
    /// [n] f64 on the model's device.
    pub since_fired: Tensor,
    pub dead_tokens: u64,
}

impl DeadTracker {
    pub fn new(n: usize, dead_tokens: u64, device: &candle_core::Device) -> Result<Self> {
        Ok(Self {
            since_fired: Tensor::zeros(n, DType::F64, device)?,
            dead_tokens,
        })
    }

    /// Counts the batch's tokens for every latent and resets those among the kept activations (value > 0).
    pub fn update(&mut self, enc: &Encoded, n: usize) -> Result<()> {
        let fired = fired_latents(&enc.idx, &enc.vals, n)?;
        self.update_fired(&fired, enc.batch)
    }

    /// Counts `tokens` for every latent and resets those where `fired` [n] is positive.
    pub fn update_fired(&mut self, fired: &Tensor, tokens: usize) -> Result<()> {
        let grown = (&self.since_fired + tokens as f64)?;
        let zero = self.since_fired.zeros_like()?;
        self.since_fired = fired.gt(0f64)?.where_cond(&zero, &grown)?;
        Ok(())
    }

    /// u8 mask [n] of the dead latents and their count.
    pub fn dead(&self) -> Result<(Tensor, usize)> {
        let mask = self.since_fired.ge(self.dead_tokens as f64)?;
        let count = mask.to_dtype(DType::F32)?.sum_all()?.to_scalar::<f32>()? as usize;
        Ok((mask, count))
    }
}

/// The normalized aux-k loss, or None when no latent is dead. `scores` are the selection scores of
/// `enc` (ReLU pre-activations [B, n]); on CUDA the sparse form overwrites them. `decode` picks the
/// sparse form (the selected pairs) or the dense one over the dead columns (`aux_dense`, training only:
/// it needs the weight sinks); `Auto` takes the cheaper by [`prefer_dense`]. With `share` (this rank's
/// rows of a global batch) the residual's spread is the global batch's.
#[allow(clippy::too_many_arguments)] // the step's tensors and the selector, each used once
pub fn aux_loss(
    sae: &Sae,
    enc: &Encoded,
    scores: Tensor,
    x: &Tensor,
    recon: &Tensor,
    dead: (&Tensor, usize),
    k_aux: usize,
    decode: AuxDecode,
    (selector, seed): (profk::Selector, u64),
    share: Option<&BatchShare>,
) -> Result<Option<Tensor>> {
    let n_dead = dead.1;
    if n_dead == 0 || k_aux == 0 {
        return Ok(None);
    }
    let (residual, mut denom) = residual_spread(x, recon)?;
    if let Some(share) = share {
        denom = share.spread(&residual)?;
    }
    if denom.is_nan() || denom <= 0.0 {
        return Ok(None);
    }
    let keep = k_aux.min(n_dead);
    let d = sae.shape.d_in();
    let dense = match (&sae.sinks, decode) {
        (None, _) | (_, AuxDecode::Sparse) => None,
        (Some(s), AuxDecode::Dense) => Some(s),
        (Some(s), AuxDecode::Auto) => {
            prefer_dense(enc.batch, keep, n_dead, d, flops_per_byte(sae)).then_some(s)
        }
    };
    if let Some(sinks) = dense {
        let loss = dead_columns_loss(
            sae,
            sinks,
            &enc.xc,
            &scores,
            (&residual, denom),
            dead,
            keep,
            (selector, seed),
        )?;
        return Ok(Some(loss));
    }
    let aux_recon = pairs_decode(sae, enc, scores, dead, keep, (selector, seed))?;
    let l2 = (&residual - aux_recon)?.sqr()?.sum(1)?.mean(0)?;
    Ok(Some((l2 / denom)?))
}

/// The residual `e = x − recon` (detached) and its spread: the mean over tokens of ‖e_b − mean(e)‖².
fn residual_spread(x: &Tensor, recon: &Tensor) -> Result<(Tensor, f64)> {
    let recon = recon.detach();
    #[cfg(feature = "cuda")]
    if x.device().is_cuda() {
        let f32c = |t: &Tensor| -> Result<Tensor> { Ok(t.to_dtype(DType::F32)?.contiguous()?) };
        return Ok(crate::cuda::residual_spread(&f32c(x)?, &f32c(&recon)?)?);
    }
    let residual = (x - recon)?;
    let spread = residual
        .broadcast_sub(&residual.mean_keepdim(0)?)?
        .sqr()?
        .sum(1)?
        .mean(0)?
        .to_scalar::<f32>()? as f64;
    Ok((residual, spread))
}

/// The aux reconstruction through the B·keep selected pairs.
fn pairs_decode(
    sae: &Sae,
    enc: &Encoded,
    scores: Tensor,
    (mask, _): (&Tensor, usize),
    keep: usize,
    (selector, seed): (profk::Selector, u64),
) -> Result<Tensor> {
    // Only the dead latents compete: the live columns score −1, below every dead one (scores ≥ 0), and
    // each row keeps at most the dead count, so every pick is a dead latent.
    let scores = mask_live(scores, mask)?;
    let flat = select_rows(&scores, keep, selector, seed)?;
    drop(scores);
    let vals = sae.values_at(&enc.xc, &flat)?;
    if sae.sparse {
        sae.decode_pairs(&vals, &flat, enc.batch)
    } else {
        dense_decode(&vals, &flat, sae.w_dec.as_tensor(), enc.batch)
    }
}

/// `scores` with the columns of live latents (mask 0) set to −1.
fn mask_live(scores: Tensor, dead: &Tensor) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if scores.device().is_cuda() {
        let scores = scores.contiguous()?;
        crate::cuda::mask_live_inplace(&scores, &dead.to_dtype(DType::U8)?.contiguous()?)?;
        return Ok(scores);
    }
    let dead = dead.to_dtype(scores.dtype())?.unsqueeze(0)?;
    Ok(scores.broadcast_mul(&dead)?.broadcast_add(&(dead - 1.0)?)?)
}
