//! The second pass of the dashboards, over the chosen latents only: every held-out context is encoded
//! again to bin the latents' non-zero activations over their range, to draw tokens uniformly from each
//! interval of that range (a bounded reservoir per interval, so memory does not grow with the data),
//! and to cut the windows of their top contexts.
use super::{contexts_per_batch, encoded, FeatureOptions, HeldoutContexts, Hit, InferenceSae};
use crate::Result;
use candle_core::{Device, Tensor};
use eval::report::features::Histogram;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

/// A window of one context around a token of interest: the position of its first token, the token's
/// index in the window and the latent's activations over it.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Window {
    pub context: usize,
    pub start: usize,
    pub focus: usize,
    pub values: Vec<f32>,
}

/// One interval [lower, upper) of a latent's activations: how many tokens fell in it, and a uniform
/// sample of them.
#[derive(Debug)]
pub(super) struct Interval {
    pub lower: f32,
    pub upper: f32,
    pub count: u64,
    pub samples: Vec<Window>,
}

/// What the pass finds for one latent.
#[derive(Debug)]
pub(super) struct LatentSamples {
    /// The windows of its top hits, in the hits' order.
    pub top: Vec<Window>,
    /// Its non-zero activations in equal-width bins over [0, max]; `None` when it never fired.
    pub histogram: Option<Histogram>,
    pub intervals: Vec<Interval>,
}

/// The bin of `v` among `bins` equal-width bins over [0, max] (the top value in the last bin).
fn bin_of(v: f32, max: f32, bins: usize) -> usize {
    (((v / max) * bins as f32).floor() as usize).min(bins - 1)
}

fn edges(max: f32, bins: usize) -> Vec<f32> {
    (0..=bins).map(|i| max * i as f32 / bins as f32).collect()
}

/// Keeps `items[..keep]` a uniform sample of everything offered (Algorithm R).
fn offer(
    items: &mut Vec<Window>,
    seen: u64,
    keep: usize,
    rng: &mut ChaCha8Rng,
    make: impl FnOnce() -> Window,
) {
    if items.len() < keep {
        items.push(make());
    } else {
        let slot = rng.random_range(0..seen) as usize;
        if slot < keep {
            items[slot] = make();
        }
    }
}

/// Encodes the first `n_contexts` held-out contexts for the latents `columns` (columns of W_enc),
/// whose top hits from the first pass are `hits` (their first hit's value being the latent's maximum).
pub(super) fn sample(
    sae: &InferenceSae,
    data: &HeldoutContexts,
    n_contexts: usize,
    columns: &[u32],
    hits: &[Vec<Hit>],
    opts: &FeatureOptions,
    device: &Device,
) -> Result<Vec<LatentSamples>> {
    let t = data.context_len;
    let maxes: Vec<f32> = hits
        .iter()
        .map(|h| h.first().map_or(0.0, |h| h.value))
        .collect();
    let (hist_bins, q_bins) = (opts.histogram_bins.max(1), opts.quantile_bins.max(1));
    let mut out: Vec<LatentSamples> = hits
        .iter()
        .zip(&maxes)
        .map(|(h, &max)| LatentSamples {
            top: vec![
                Window {
                    context: 0,
                    start: 0,
                    focus: 0,
                    values: Vec::new()
                };
                h.len()
            ],
            histogram: (max > 0.0).then(|| Histogram {
                edges: edges(max, hist_bins),
                counts: vec![0; hist_bins],
            }),
            intervals: if max > 0.0 && opts.quantile_examples > 0 {
                let e = edges(max, q_bins);
                e.windows(2)
                    .map(|w| Interval {
                        lower: w[0],
                        upper: w[1],
                        count: 0,
                        samples: Vec::new(),
                    })
                    .collect()
            } else {
                Vec::new()
            },
        })
        .collect();
    if columns.is_empty() {
        return Ok(out);
    }
    let mut wanted: BTreeMap<usize, Vec<(usize, usize)>> = BTreeMap::new();
    for (j, latent_hits) in hits.iter().enumerate() {
        for (slot, hit) in latent_hits.iter().enumerate() {
            wanted.entry(hit.context).or_default().push((j, slot));
        }
    }
    let idx = Tensor::from_vec(columns.to_vec(), columns.len(), device)?;
    let w = &sae.weights;
    let w_enc = w.w_enc.index_select(&idx, 1)?;
    let b_enc = w.b_enc.index_select(&idx, 0)?;
    let thr = w.threshold.index_select(&idx, 0)?;
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let all: Vec<usize> = (0..n_contexts).collect();
    for batch in all.chunks(contexts_per_batch(t, columns.len())) {
        let x = data.activations_of(batch, device)?;
        let acts: Vec<Vec<f32>> = sae
            .encode_with(&x, &w_enc, &b_enc, &thr)?
            .to_device(&Device::Cpu)?
            .to_vec2()?;
        for (b, &context) in batch.iter().enumerate() {
            let ids = data.context(context);
            let value = |p: usize, j: usize| {
                if encoded(p, ids[p]) {
                    acts[b * t + p][j]
                } else {
                    0.0
                }
            };
            let window = |j: usize, p: usize| {
                let start = p.saturating_sub(opts.before);
                let end = (p + opts.after + 1).min(t);
                Window {
                    context,
                    start,
                    focus: p - start,
                    values: (start..end).map(|q| value(q, j)).collect(),
                }
            };
            for &(j, slot) in wanted.get(&context).map_or(&[][..], Vec::as_slice) {
                out[j].top[slot] = window(j, hits[j][slot].position);
            }
            for (j, latent) in out.iter_mut().enumerate() {
                let max = maxes[j];
                if max <= 0.0 {
                    continue;
                }
                for p in 0..t {
                    let v = value(p, j);
                    if v <= 0.0 {
                        continue;
                    }
                    if let Some(h) = latent.histogram.as_mut() {
                        h.counts[bin_of(v, max, hist_bins)] += 1;
                    }
                    if let Some(interval) = latent.intervals.get_mut(bin_of(v, max, q_bins)) {
                        interval.count += 1;
                        offer(
                            &mut interval.samples,
                            interval.count,
                            opts.quantile_examples,
                            &mut rng,
                            || window(j, p),
                        );
                    }
                }
            }
        }
    }
    // Strongest sampled token first within each interval.
    for latent in &mut out {
        for interval in &mut latent.intervals {
            interval.samples.sort_by(|a, b| {
                b.values[b.focus]
                    .total_cmp(&a.values[a.focus])
                    .then(a.context.cmp(&b.context))
                    .then(a.start.cmp(&b.start))
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_cover_zero_to_max_with_the_max_in_the_last() {
        assert_eq!(bin_of(0.01, 1.0, 10), 0);
        assert_eq!(bin_of(0.5, 1.0, 10), 5);
        assert_eq!(bin_of(1.0, 1.0, 10), 9);
        assert_eq!(bin_of(1.0000001, 1.0, 10), 9, "rounding above the max");
        assert_eq!(edges(2.0, 4), vec![0.0, 0.5, 1.0, 1.5, 2.0]);
    }

    #[test]
    fn the_reservoir_keeps_a_uniform_sample() {
        // Each of 20 items offered to a reservoir of 5 is kept with probability 1/4.
        let mut kept = [0u32; 20];
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let trials = 4000;
        for _ in 0..trials {
            let mut items = Vec::new();
            for i in 0..20 {
                let w = Window {
                    context: i,
                    start: 0,
                    focus: 0,
                    values: vec![1.0],
                };
                offer(&mut items, i as u64 + 1, 5, &mut rng, || w);
            }
            assert_eq!(items.len(), 5);
            for w in items {
                kept[w.context] += 1;
            }
        }
        for (i, k) in kept.iter().enumerate() {
            let share = *k as f64 / trials as f64;
            assert!((share - 0.25).abs() < 0.04, "item {i} kept {share}");
        }
    }
}
