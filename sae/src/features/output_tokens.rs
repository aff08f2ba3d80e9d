//! The output tokens a latent promotes and suppresses: its decoder direction through the unembedding,
//! `W_dec[latent] · W_U`, the direct effect of the latent on every logit (the last hook point's decoder
//! row for a crosscoder, the one nearest the output).
use super::InferenceSae;
use crate::{Error, Result};
use activations::Gpt2Tokenizer;
use candle_core::{DType, Device, Tensor};
use eval::report::features::{Histogram, TokenEffect};
use models::Model;
use std::cmp::Ordering;

/// The unembedding the decoder directions go through, or why a run has none.
pub enum Unembedding<'a> {
    /// The output head [vocab, d_model] (GPT-2's tied token embedding: `W_U = wteᵀ`).
    Tied(&'a Tensor),
    Missing(String),
}

impl<'a> Unembedding<'a> {
    /// The model's unembedding, or a note that the run loaded no model (or no output head).
    pub fn of_model(model: Option<&'a Model>) -> Self {
        match model {
            Some(m) => match m.unembedding() {
                Some(u) => Unembedding::Tied(u),
                None => Unembedding::Missing("the model was loaded without its output head".into()),
            },
            None => Unembedding::Missing(
                "the run loaded no model, so there is no unembedding to read the decoder directions \
                 through"
                    .into(),
            ),
        }
    }
}

/// One latent's strongest effects and the distribution of all of them.
#[derive(Debug)]
pub(super) struct OutputEffects {
    pub promoted: Vec<TokenEffect>,
    pub suppressed: Vec<TokenEffect>,
    pub histogram: Histogram,
}

/// Latents whose logit effects are computed at once: [chunk, vocab] floats.
const LATENTS_PER_CHUNK: usize = 64;

/// The `keep` most promoted and most suppressed tokens of each of `latents`, and the histogram of each
/// latent's effects in `bins` bins.
pub(super) fn output_effects(
    sae: &InferenceSae,
    wte: &Tensor,
    latents: &[usize],
    keep: usize,
    bins: usize,
    tokenizer: &Gpt2Tokenizer,
) -> Result<Vec<OutputEffects>> {
    let (vocab, d) = wte.dims2()?;
    if d != sae.d_model {
        return Err(Error::Shape(format!(
            "the unembedding is [{vocab}, {d}] but the SAE's hook points are {} wide",
            sae.d_model
        )));
    }
    let device = sae.weights.w_dec.device();
    let w_u = wte.to_device(device)?.to_dtype(DType::F32)?.t()?;
    let last = sae.d_model * (sae.layers - 1);
    let mut out = Vec::with_capacity(latents.len());
    for chunk in latents.chunks(LATENTS_PER_CHUNK) {
        let ids: Vec<u32> = chunk.iter().map(|&l| l as u32).collect();
        let idx = Tensor::from_vec(ids, chunk.len(), device)?;
        let rows = sae
            .weights
            .w_dec
            .index_select(&idx, 0)?
            .narrow(1, last, sae.d_model)?;
        let effects: Vec<Vec<f32>> = rows.matmul(&w_u)?.to_device(&Device::Cpu)?.to_vec2()?;
        for row in effects {
            out.push(OutputEffects {
                promoted: strongest(&row, keep, |a, b| b.total_cmp(a), tokenizer)?,
                suppressed: strongest(&row, keep, |a, b| a.total_cmp(b), tokenizer)?,
                histogram: histogram(&row, bins.max(1)),
            });
        }
    }
    Ok(out)
}

/// The first `keep` tokens of `row` in the order `first` (ties: the lower token id).
fn strongest(
    row: &[f32],
    keep: usize,
    first: impl Fn(&f32, &f32) -> Ordering,
    tokenizer: &Gpt2Tokenizer,
) -> Result<Vec<TokenEffect>> {
    let order = |a: &usize, b: &usize| first(&row[*a], &row[*b]).then(a.cmp(b));
    let mut ids: Vec<usize> = (0..row.len()).collect();
    let keep = keep.min(ids.len());
    if keep == 0 {
        return Ok(Vec::new());
    }
    if keep < ids.len() {
        ids.select_nth_unstable_by(keep - 1, order);
        ids.truncate(keep);
    }
    ids.sort_by(order);
    ids.into_iter()
        .map(|id| {
            Ok(TokenEffect {
                token: token_text(tokenizer, id as u32)?,
                token_id: id as u32,
                value: row[id],
            })
        })
        .collect()
}

/// A token decoded alone; ids past the tokenizer's vocabulary (padding rows of an embedding) are
/// named as such.
fn token_text(tokenizer: &Gpt2Tokenizer, id: u32) -> Result<String> {
    if (id as usize) < tokenizer.vocab_size() {
        Ok(tokenizer.decode(&[id])?)
    } else {
        Ok(format!("<|outofrange:{id}|>"))
    }
}

/// `values` in `bins` equal-width bins over their range.
fn histogram(values: &[f32], bins: usize) -> Histogram {
    let lo = values.iter().copied().fold(f32::INFINITY, f32::min);
    let hi = values.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if !(lo.is_finite() && hi.is_finite()) {
        return Histogram {
            edges: Vec::new(),
            counts: Vec::new(),
        };
    }
    let width = (hi - lo).max(f32::MIN_POSITIVE) / bins as f32;
    let mut counts = vec![0u64; bins];
    for v in values {
        counts[(((v - lo) / width).floor() as usize).min(bins - 1)] += 1;
    }
    Histogram {
        edges: (0..=bins).map(|i| lo + width * i as f32).collect(),
        counts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_logit_histogram_holds_every_token() {
        let h = histogram(&[-1.0, 0.0, 0.5, 3.0], 4);
        assert_eq!(h.counts, vec![1, 2, 0, 1]);
        assert_eq!(h.edges.first(), Some(&-1.0));
        assert_eq!(h.edges.last(), Some(&3.0));
        assert_eq!(histogram(&[2.0, 2.0], 3).total(), 2, "a flat row");
    }
}
