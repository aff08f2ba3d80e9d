//! Matryoshka BatchTopK SAE (Bussmann et al. 2025; Nabeshima 2024): the dictionary is cut into nested prefixes
//! by `group_sizes`; one batch-global selection over all n latents is shared by every level, and each prefix
//! must reconstruct the input on its own. The loss is dictionary_learning's (`MatryoshkaBatchTopKTrainer`
//! with its default group weights 1/G): the mean over the G prefixes of (1/G)·(mean over tokens of
//! ‖x − (acts[:, ..e]·W_dec[..e] + b_dec)‖²). Early latents so learn general features and later ones
//! refine them.
//!
//! The sparse form computes every prefix from the selected pairs at the cost of one decode
//! ([`crate::nested`]); the dense form (`decode = "dense"`) decodes each prefix of the dense B×n
//! activations, as a reference.
use crate::model::{dense_acts, l2_loss, Encoded, Forward, Sae};
use crate::nested::{default_coefs, prefix_loss, PrefixLoss};
use crate::Result;
use candle_core::Tensor;

/// The loss and reconstruction of the encoded batch `enc` of `x`.
pub fn forward(sae: &Sae, x: &Tensor, enc: Encoded) -> Result<Forward> {
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
    let loss = loss.ok_or_else(|| crate::Error::Shape("matryoshka without groups".into()))?;
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
