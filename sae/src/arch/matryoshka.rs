//! Matryoshka BatchTopK SAE (Bussmann et al. 2025; Nabeshima 2024): the dictionary is cut into nested prefixes
//! by `group_sizes`; one batch-global selection over all n latents is shared by every level, and each prefix
//! must reconstruct the input on its own: loss = Σ_prefix mean over tokens of ‖x − (acts[:, ..e]·W_dec[..e] + b_dec)‖².
//! Early latents so learn general features and later ones refine them.
use crate::model::{l2_loss, Forward, Sae};
use crate::Result;
use candle_core::Tensor;

pub fn forward(sae: &Sae, x: &Tensor, selector: profk::Selector, seed: u64) -> Result<Forward> {
    let enc = sae.encode(x, selector, seed)?;
    let mut recon = sae
        .b_dec
        .as_tensor()
        .unsqueeze(0)?
        .broadcast_as(x.shape())?
        .contiguous()?;
    let mut loss: Option<Tensor> = None;
    let mut start = 0;
    for &len in &sae.shape.groups {
        recon = (recon + sae.decode_latents(&enc, Some((start, len)))?)?;
        let level = l2_loss(x, &recon)?;
        loss = Some(match loss {
            Some(total) => (total + level)?,
            None => level,
        });
        start += len;
    }
    let loss = loss.expect("validated: at least one group");
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
