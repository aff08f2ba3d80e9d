//! Matryoshka BatchTopK SAE (Bussmann et al. 2025; Nabeshima 2024): the dictionary is cut into nested prefixes
//! by `group_sizes`; one batch-global selection over all n latents is shared by every level, and each prefix
//! must reconstruct the input on its own. The loss is dictionary_learning's (`MatryoshkaBatchTopKTrainer`
//! with its default group weights 1/G): the mean over the G prefixes of (1/G)·(mean over tokens of
//! ‖x − (acts[:, ..e]·W_dec[..e] + b_dec)‖²). Early latents so learn general features and later ones
//! refine them.
//!
//! The recipe: encode and select as BatchTopK does ([`Sae::encode_in`]), then decode every prefix and
//! sum the weighted prefix losses ([`forward`]). The sparse form computes every prefix from the selected
//! pairs at the cost of one decode ([`prefix_loss`], below); the dense form (`decode = "dense"`) decodes
//! each prefix of the dense B×n activations, as a reference. The config's `group_sizes` are checked in
//! [`validate`].
//!
//! ## The prefix losses from the selected pairs
//!
//! Matryoshka's nested-prefix reconstruction losses straight from the S = B·k selected pairs: no dense
//! B×n matrix and no decode per prefix.
//!
//! The latents are cut at prefix ends m_1 < … < m_G = n, and prefix g reconstructs row b as
//! `x̂_g[b] = b_dec + Σ_{pairs (b, j, a), j < m_g} a·W_dec[j]`. The pairs come in ascending flat index, so
//! a row's pairs are in latent order and each prefix's pairs are a leading run of them: one running sum
//! per row, read out at every prefix end, gives every residual `e_g = x − x̂_g` for the price of one
//! sparse decode (B·k·d), plus G writes of B×d. The loss is `Σ_g c_g·Σ_b ‖e_g[b]‖²`.
//!
//! Backward: `dL/dx̂_g = −2·c_g·e_g`, and a pair of group h lies in every prefix from h on, so the
//! gradient reaching it is the suffix sum `u_h = Σ_{g ≥ h} dL/dx̂_g` (G passes over B×d). Stacked
//! group-major as [G·B, d], with each pair's flat index rebased to row h·B + b, the gradients of the
//! values and of W_dec are the same pair products as BatchTopK's (one dot product per pair, one
//! reduction by latent), and b_dec's is the column sum of u_1 (b_dec is in every prefix).
use crate::config::SaeConfig;
use crate::distributed::BatchShare;
use crate::model::{dense_acts, l2_loss, Forward, Sae};
use crate::sparse::{ColReduce, GradSink, PairDot};
use crate::{Error, Result};
use candle_core::{CustomOp3, DType, Tensor};
use rayon::prelude::*;
use runtime::{cpu_fwd, cuda_fwd};

/// The training forward pass on inputs `x` [B, d] (this rank's rows of a global batch with `share`):
/// the batch-global selection, every prefix's reconstruction and the weighted sum of their losses.
pub fn forward(
    sae: &Sae,
    x: &Tensor,
    selector: profk::Selector,
    seed: u64,
    share: Option<&BatchShare>,
) -> Result<Forward> {
    let enc = sae.encode_in(x, selector, seed, share)?;
    let groups = &sae.shape.groups;
    let coefs = default_coefs(groups.len(), enc.batch);
    let (w, b_dec) = (sae.w_dec.as_tensor(), sae.b_dec.as_tensor());
    if sae.sparse {
        let sink = sae.sinks.as_ref().map(|s| &s.w_dec);
        let PrefixLoss { loss, recon } = prefix_loss(
            x,
            (&enc.vals, &enc.idx),
            (w, b_dec),
            (&prefix_ends(groups), &coefs),
            sink,
        )?;
        return Ok(Forward { loss, recon, enc });
    }
    let acts = dense_acts(&enc, sae.shape.n)?;
    let mut recon = b_dec.unsqueeze(0)?.broadcast_as(x.shape())?.contiguous()?;
    let mut loss: Option<Tensor> = None;
    let mut start = 0;
    for (&len, &c) in groups.iter().zip(&coefs) {
        let part = acts
            .narrow(1, start, len)?
            // A column block of acts is strided; CUDA's matmul takes contiguous operands.
            .contiguous()?
            .matmul(&w.narrow(0, start, len)?)?;
        recon = (recon + part)?;
        // l2_loss is the mean over tokens; the coefficient is per token.
        let level = (l2_loss(x, &recon)? * (c * enc.batch as f64))?;
        loss = Some(match loss {
            Some(total) => (total + level)?,
            None => level,
        });
        start += len;
    }
    let loss = loss.ok_or_else(|| Error::Shape("matryoshka without groups".into()))?;
    Ok(Forward { loss, recon, enc })
}

/// End (exclusive) of every prefix, for per-level metrics.
pub fn prefix_ends(groups: &[usize]) -> Vec<usize> {
    groups
        .iter()
        .scan(0, |end, g| {
            *end += g;
            Some(*end)
        })
        .collect()
}

/// dictionary_learning's weights of the prefix losses (`MatryoshkaBatchTopKTrainer`, default
/// `group_weights`): each prefix's mean over tokens of ‖x − x̂_g‖² times 1/G, averaged over the G
/// prefixes, so the coefficient of `Σ_b ‖e_g[b]‖²` is 1/(G²·B).
pub fn default_coefs(groups: usize, batch: usize) -> Vec<f64> {
    let g = groups as f64;
    vec![1.0 / (g * g * batch.max(1) as f64); groups]
}

/// `sae.group_sizes`: non-empty, positive, summing to `sae.latents`.
pub fn validate(s: &SaeConfig) -> Result<()> {
    if s.group_sizes.is_empty() || s.group_sizes.contains(&0) {
        return Err(Error::config(
            "sae.group_sizes",
            "matryoshka needs non-empty, positive group sizes",
        ));
    }
    let sum: usize = s.group_sizes.iter().sum();
    if sum != s.latents {
        return Err(Error::config(
            "sae.group_sizes",
            format!("sum to {sum}, but sae.latents = {}", s.latents),
        ));
    }
    Ok(())
}

/// The loss of the nested prefixes and the full-dictionary reconstruction.
pub struct PrefixLoss {
    /// `Σ_g coefs[g]·Σ_b ‖x_b − x̂_g[b]‖²`, differentiable wrt the values, W_dec and b_dec.
    pub loss: Tensor,
    /// `x̂_G` [B, d], detached.
    pub recon: Tensor,
}

/// The nested-prefix loss of `x [B, d]` (no gradient) reconstructed from `vals [S]` at the flat indices
/// `idx [S]` (i64, strictly ascending) with `w_dec [n, d]` and `b_dec [d]`; `ends` are the prefix ends
/// (ascending, the last n) and `coefs` their weights. With a sink, W_dec's gradient goes there instead of
/// through candle's autograd.
pub fn prefix_loss(
    x: &Tensor,
    (vals, idx): (&Tensor, &Tensor),
    (w_dec, b_dec): (&Tensor, &Tensor),
    (ends, coefs): (&[usize], &[f64]),
    sink: Option<&GradSink>,
) -> Result<PrefixLoss> {
    let (batch, d) = x.dims2()?;
    let (n, _) = w_dec.dims2()?;
    check_ends(ends, coefs, n)?;
    let groups = ends.len();
    let x = x.detach().to_dtype(DType::F32)?.contiguous()?;
    let idx = idx.to_dtype(DType::I64)?.contiguous()?;
    let (errors, rebased) = prefix_errors(
        &x,
        (&vals.detach().contiguous()?, &idx),
        (&w_dec.detach().contiguous()?, &b_dec.detach().contiguous()?),
        ends,
    )?;
    let value = weighted_sum_sq(&errors, coefs, batch)?;
    let recon = (&x - errors.narrow(0, (groups - 1) * batch, batch)?)?;
    let coefs_f32: Vec<f32> = coefs.iter().map(|&c| c as f32).collect();
    let grads = PrefixGrad {
        errors,
        rebased,
        coefs: Tensor::from_vec(coefs_f32, groups, x.device())?,
        batch,
        n,
        d,
        sink: sink.cloned(),
    };
    let w = match sink {
        Some(_) => w_dec.detach(),
        None => w_dec.clone(),
    };
    let tap = vals.contiguous()?.apply_op3(&w, b_dec, grads)?;
    Ok(PrefixLoss {
        loss: (value + tap)?,
        recon,
    })
}

fn check_ends(ends: &[usize], coefs: &[f64], n: usize) -> Result<()> {
    let ascending = ends.windows(2).all(|p| p[0] < p[1]);
    if ends.is_empty() || !ascending || ends.last() != Some(&n) || ends[0] == 0 {
        return Err(Error::Shape(format!(
            "prefix ends {ends:?} must be positive, strictly ascending and end at n = {n}"
        )));
    }
    if coefs.len() != ends.len() {
        return Err(Error::Shape(format!(
            "{} prefix weights for {} prefixes",
            coefs.len(),
            ends.len()
        )));
    }
    Ok(())
}

/// The residuals of every prefix `[G·B, d]` (group-major) and the pairs' flat indices rebased on that
/// layout (i64 [S]): pair s of row b and group h becomes `idx[s] + h·B·n`.
pub fn prefix_errors(
    x: &Tensor,
    (vals, idx): (&Tensor, &Tensor),
    (w, b_dec): (&Tensor, &Tensor),
    ends: &[usize],
) -> Result<(Tensor, Tensor)> {
    #[cfg(feature = "cuda")]
    if x.device().is_cuda() {
        let ends_i: Vec<i64> = ends.iter().map(|&e| e as i64).collect();
        let ends_t = Tensor::from_vec(ends_i, ends.len(), x.device())?;
        return Ok(crate::cuda::prefix_errors(
            x,
            (vals, idx),
            (w, b_dec),
            &ends_t,
        )?);
    }
    let (rows, d) = x.dims2()?;
    let (n, _) = w.dims2()?;
    let host = |t: &Tensor| -> Result<Vec<f32>> { Ok(t.flatten_all()?.to_vec1::<f32>()?) };
    let (x_h, vals_h, w_h, b_h) = (host(x)?, host(vals)?, host(w)?, host(b_dec)?);
    let idx_h: Vec<i64> = idx.to_vec1()?;
    let end = (rows * n) as i64;
    if let Some(bad) = idx_h.iter().find(|&&i| i < 0 || i >= end) {
        return Err(Error::Shape(format!(
            "flat index {bad} out of range for {rows} rows of {n}"
        )));
    }
    if let Some(p) = idx_h.windows(2).position(|p| p[0] >= p[1]) {
        return Err(Error::Shape(format!(
            "flat indices must be strictly ascending: {} then {} at position {p}",
            idx_h[p],
            idx_h[p + 1]
        )));
    }
    let groups = ends.len();
    let bounds: Vec<usize> = (0..=rows)
        .map(|b| idx_h.partition_point(|&i| i < (b * n) as i64))
        .collect();
    // Row b's residuals of every prefix, [G, d].
    let per_row: Vec<Vec<f32>> = (0..rows)
        .into_par_iter()
        .map(|b| {
            let mut out = vec![0f32; groups * d];
            let mut acc = vec![0f32; d];
            let mut s = bounds[b];
            for (g, &e) in ends.iter().enumerate() {
                let stop = (b * n + e) as i64;
                while s < bounds[b + 1] && idx_h[s] < stop {
                    let col = idx_h[s] as usize - b * n;
                    let v = vals_h[s];
                    for (a, &wv) in acc.iter_mut().zip(&w_h[col * d..(col + 1) * d]) {
                        *a = v.mul_add(wv, *a);
                    }
                    s += 1;
                }
                for c in 0..d {
                    out[g * d + c] = x_h[b * d + c] - (acc[c] + b_h[c]);
                }
            }
            out
        })
        .collect();
    let mut errors = vec![0f32; groups * rows * d];
    for (b, row) in per_row.iter().enumerate() {
        for g in 0..groups {
            let dst = (g * rows + b) * d;
            errors[dst..dst + d].copy_from_slice(&row[g * d..(g + 1) * d]);
        }
    }
    let n_i = n as i64;
    let rebased: Vec<i64> = idx_h
        .iter()
        .map(|&i| {
            let col = (i % n_i) as usize;
            let g = ends.partition_point(|&e| e <= col).min(groups - 1);
            i + (g * rows) as i64 * n_i
        })
        .collect();
    let pairs = rebased.len();
    Ok((
        Tensor::from_vec(errors, (groups * rows, d), x.device())?,
        Tensor::from_vec(rebased, pairs, x.device())?,
    ))
}

/// `Σ_g coefs[g]·‖errors_g‖²` as an f32 scalar on the residuals' device (fixed-order reductions on CUDA,
/// read by no one before the step's end; f64 on the CPU).
fn weighted_sum_sq(errors: &Tensor, coefs: &[f64], batch: usize) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if errors.device().is_cuda() {
        let mut total: Option<Tensor> = None;
        for (g, &c) in coefs.iter().enumerate() {
            let part = errors.narrow(0, g * batch, batch)?;
            let term = (crate::cuda::sum_sq_scalar(&part)? * c)?;
            total = Some(match total {
                Some(t) => (t + term)?,
                None => term,
            });
        }
        return total.ok_or_else(|| Error::Shape("no prefixes".into()));
    }
    let mut total = 0f64;
    for (g, &c) in coefs.iter().enumerate() {
        let part = errors.narrow(0, g * batch, batch)?.to_dtype(DType::F64)?;
        total += c * part.sqr()?.sum_all()?.to_scalar::<f64>()?;
    }
    Ok(Tensor::new(total as f32, errors.device())?)
}

/// `u[g] = Σ_{h ≥ g} −2·coefs[h]·grad·errors[h]` over the group-major `[G·B, d]` residuals, summed from
/// the last group down in f32 (the CUDA kernel's order).
fn upstream(errors: &Tensor, coefs: &Tensor, grad: &Tensor) -> candle_core::Result<Tensor> {
    #[cfg(feature = "cuda")]
    if errors.device().is_cuda() {
        let grad = grad.to_dtype(DType::F32)?.contiguous()?;
        return crate::cuda::prefix_upstream(errors, coefs, &grad);
    }
    let coefs: Vec<f32> = coefs.to_vec1()?;
    let up = -2f32 * grad.to_dtype(DType::F32)?.to_scalar::<f32>()?;
    let groups = coefs.len();
    let e: Vec<f32> = errors.flatten_all()?.to_vec1()?;
    let len = e.len() / groups;
    let mut u = vec![0f32; e.len()];
    u.par_chunks_mut(len.max(1))
        .enumerate()
        .for_each(|(g, chunk)| {
            // Group g's suffix sum, in the same order as the kernel (from the last group down).
            for (i, o) in chunk.iter_mut().enumerate() {
                let mut acc = 0f32;
                for h in (g..groups).rev() {
                    acc = (coefs[h] * up).mul_add(e[h * len + i], acc);
                }
                *o = acc;
            }
        });
    Tensor::from_vec(u, errors.shape(), errors.device())
}

/// A zero scalar in the forward pass (inputs: the values, W_dec, b_dec) whose backward turns the loss's
/// gradient into the per-group upstream gradients and runs the pair products on them.
struct PrefixGrad {
    /// Residuals of every prefix [G·B, d] (f32, group-major).
    errors: Tensor,
    /// The pairs' flat indices on the [G·B, n] layout (i64).
    rebased: Tensor,
    /// The prefixes' loss weights (f32 [G], on the device).
    coefs: Tensor,
    batch: usize,
    n: usize,
    d: usize,
    sink: Option<GradSink>,
}

impl CustomOp3 for PrefixGrad {
    fn name(&self) -> &'static str {
        "prefix-loss"
    }

    cpu_fwd!(|_, (_s1, _l1), (_s2, _l2), (_s3, _l3)| Ok(crate::sparse::zero_loss_cpu()));

    cuda_fwd!(|_, (s1, _l1), (_s2, _l2), (_s3, _l3)| crate::sparse::zero_loss_cuda(s1));

    fn bwd(
        &self,
        vals: &Tensor,
        w: &Tensor,
        _b_dec: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let u = upstream(&self.errors, &self.coefs, grad)?;
        let n = self.n;
        let d_vals = u.apply_op3_no_bwd(&self.rebased, &w.detach(), &PairDot { n })?;
        let d_w = match &self.sink {
            Some(sink) => {
                sink.add_col_reduce(&u, &self.rebased, vals, n)?;
                None
            }
            None => Some(u.apply_op3_no_bwd(&self.rebased, &vals.detach(), &ColReduce { n })?),
        };
        let d_b_dec = u.narrow(0, 0, self.batch)?.sum(0)?.reshape(self.d)?;
        Ok((Some(d_vals), d_w, Some(d_b_dec)))
    }
}
