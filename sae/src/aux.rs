//! Aux-k loss (Gao et al. 2024): the `k_aux` largest pre-activations of each token among the dead latents
//! reconstruct the residual error `e = x − recon` (detached); the loss is normalized by the variance of `e`.
//! It gives dead latents a gradient toward the directions the live ones miss.
use crate::model::masked_dense;
use crate::model::{Encoded, Sae};
use crate::select::select_rows;
use crate::sparse_decode::sparse_decode;
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
    pub fn update(&mut self, enc: &Encoded, n: usize, sparse: bool) -> Result<()> {
        let fired = if sparse {
            let (_, cols) = crate::sparse_decode::split_flat(&enc.idx, n)?;
            let positive = enc.vals.detach().gt(0f64)?.to_dtype(DType::F64)?;
            Tensor::zeros(n, DType::F64, enc.vals.device())?.index_add(&cols, &positive, 0)?
        } else {
            let acts = crate::model::dense_acts(enc, n)?.detach();
            acts.max(0)?.gt(0f64)?.to_dtype(DType::F64)?
        };
        let grown = (&self.since_fired + enc.batch as f64)?;
        let zero = Tensor::zeros(n, DType::F64, enc.vals.device())?;
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

/// The normalized aux-k loss, or None when no latent is dead.
pub fn aux_loss(
    sae: &Sae,
    enc: &Encoded,
    x: &Tensor,
    recon: &Tensor,
    dead: (&Tensor, usize),
    k_aux: usize,
    (selector, seed): (profk::Selector, u64),
) -> Result<Option<Tensor>> {
    let (mask, n_dead) = dead;
    if n_dead == 0 || k_aux == 0 {
        return Ok(None);
    }
    // Only the dead latents compete: select among their columns, [B, n_dead].
    let flags: Vec<u8> = mask.to_vec1()?;
    let cols: Vec<u32> = (0..flags.len() as u32)
        .filter(|&j| flags[j as usize] != 0)
        .collect();
    let n_dead = cols.len();
    let keep = k_aux.min(n_dead);
    let cols = Tensor::from_vec(cols, n_dead, enc.pre.device())?;
    let src = enc.pre.index_select(&cols, 1)?;
    let scores = src.detach();
    let flat = select_rows(&scores, keep, selector, seed)?;
    let vals = src.flatten_all()?.index_select(&flat, 0)?;
    let w = sae.w_dec.as_tensor().index_select(&cols, 0)?;
    let aux_recon = if sae.sparse {
        sparse_decode(&vals, &flat, &w, enc.batch)?
    } else {
        let picked = vals.detach();
        masked_dense(&src, &scores, &picked, &flat, enc.batch, n_dead, Some(keep))?.matmul(&w)?
    };
    let residual = (x - recon)?.detach();
    let l2 = (&residual - aux_recon)?.sqr()?.sum(1)?.mean(0)?;
    let spread = residual
        .broadcast_sub(&residual.mean_keepdim(0)?)?
        .sqr()?
        .sum(1)?
        .mean(0)?;
    let denom = spread.to_scalar::<f32>()? as f64;
    if denom.is_nan() || denom <= 0.0 {
        return Ok(None);
    }
    Ok(Some((l2 / denom)?))
}
