//! Training batches: packed fixed-length contexts in a seeded order that depends only on the step, so
//! a resumed run sees exactly the batches of an uninterrupted one.
use crate::config::FinetuneConfig;
use crate::error::{Error, Result};
use activations::corpus::{CorpusSource, CorpusSpec, PackOptions, Split};
use candle_core::{Device, Tensor};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Fewest contexts per eval forward pass (forward only: larger batches run faster).
pub const EVAL_BATCH: usize = 16;

/// Where batches come from.
#[derive(Clone, Debug)]
pub enum Batches {
    /// Packed contexts of a corpus, split into train and eval.
    Corpus {
        train: Vec<Vec<u32>>,
        eval: Vec<Vec<u32>>,
        batch: usize,
        seed: u64,
    },
    /// Uniform random token ids (benchmarks).
    Synthetic {
        vocab: u32,
        context: usize,
        batch: usize,
        seed: u64,
    },
}

impl Batches {
    /// Batches from a config's `[data]` section; with a corpus, also the unigram entropy of its
    /// training tokens (nats/token, the loss of the best context-free model).
    pub fn from_config(cfg: &FinetuneConfig, vocab: usize) -> Result<(Self, Option<f64>)> {
        let d = &cfg.data;
        let seed = cfg.seed;
        if d.synthetic {
            let batches = Batches::Synthetic {
                vocab: vocab as u32,
                context: d.context,
                batch: cfg.train.batch_size,
                seed,
            };
            return Ok((batches, None));
        }
        let corpus_err = |e: activations::Error| Error::config("data.corpus", e.to_string());
        let source = CorpusSource::open(&CorpusSpec {
            corpus: d.corpus.clone(),
            text_column: d.text_column.clone(),
            token_column: d.token_column.clone(),
        })
        .map_err(corpus_err)?;
        if let Some(note) = source.detection_note() {
            eprintln!("{note}");
        }
        let pack = |split: Split, max: Option<usize>| -> Result<Vec<Vec<u32>>> {
            let opts = PackOptions {
                split,
                heldout_fraction: d.held_out_fraction,
                context_len: d.context,
                prepend_bos: true,
                tokenizer: activations::Tokenizer::new().map_err(corpus_err)?,
            };
            let packed = source.contexts(opts, max).map_err(corpus_err)?;
            Ok((0..packed.len())
                .map(|i| packed.context(i).to_vec())
                .collect())
        };
        // A streamed corpus is read only as far as the run needs: one pass of its steps and its eval.
        let streamed = source.is_streamed();
        let train_contexts = cfg.train.steps as usize * cfg.train.batch_size;
        let train = pack(Split::Train, streamed.then_some(train_contexts))?;
        let eval = if d.held_out_fraction > 0.0 {
            pack(Split::Heldout, streamed.then_some(cfg.train.eval_batches))?
        } else {
            Vec::new()
        };
        if train.is_empty() {
            return Err(Error::config(
                "data.context",
                format!(
                    "{} tokens per context leave no full context in the corpus",
                    d.context
                ),
            ));
        }
        let entropy = unigram_entropy(train.iter().flatten().copied());
        Ok((
            Batches::Corpus {
                train,
                eval,
                batch: cfg.train.batch_size,
                seed,
            },
            Some(entropy),
        ))
    }

    /// Token ids [batch, context] (u32) of training step `step`.
    pub fn train_batch(&self, step: u64, device: &Device) -> Result<Tensor> {
        self.rank_batch(step, 0, 1, device)
    }

    /// Rank `rank`'s micro-batch of step `step` in a group of `world` ranks: rows
    /// `rank·batch..(rank + 1)·batch` of the step's global batch of `world·batch` contexts, so the
    /// ranks together see what one process with `world·batch` contexts per step would.
    pub fn rank_batch(
        &self,
        step: u64,
        rank: usize,
        world: usize,
        device: &Device,
    ) -> Result<Tensor> {
        match self {
            Batches::Corpus {
                train, batch, seed, ..
            } => {
                let global = (*batch * world) as u64;
                let rows: Vec<&Vec<u32>> = (0..*batch as u64)
                    .map(|j| {
                        let position = step * global + (rank * *batch) as u64 + j;
                        let n = train.len() as u64;
                        let order = epoch_order(n as usize, *seed, position / n);
                        &train[order[(position % n) as usize]]
                    })
                    .collect();
                stack(&rows, device)
            }
            Batches::Synthetic {
                vocab,
                context,
                batch,
                seed,
            } => {
                let mut rng =
                    ChaCha8Rng::seed_from_u64(seed ^ step.wrapping_mul(0x9e37_79b9_7f4a_7c15));
                let ids: Vec<u32> = (0..batch * world * context)
                    .map(|_| rng.random_range(0..*vocab))
                    .skip(rank * batch * context)
                    .take(batch * context)
                    .collect();
                Ok(Tensor::from_vec(ids, (*batch, *context), device)?)
            }
        }
    }

    /// Held-out batches: `max_contexts` contexts spread evenly over the held-out documents (all of
    /// them when there are fewer), in batches of at least [`EVAL_BATCH`] contexts.
    pub fn eval_batches(&self, max_contexts: usize, device: &Device) -> Result<Vec<Tensor>> {
        match self {
            Batches::Corpus { eval, batch, .. } => {
                let rows = spread(eval, max_contexts);
                rows.chunks((*batch).max(EVAL_BATCH))
                    .map(|c| stack(c, device))
                    .collect()
            }
            Batches::Synthetic { .. } => Ok(Vec::new()),
        }
    }

    /// Cross-entropy (nats/token) on the tokens that [`Self::eval_batches`]`(max_contexts)`
    /// predicts, of the add-α smoothed unigram model of the training tokens with the α that
    /// minimizes it: the strongest context-free baseline, scored like the model's eval loss.
    /// None without held-out data.
    pub fn unigram_eval_loss(&self, max_contexts: usize, vocab: usize) -> Option<f64> {
        let Batches::Corpus { train, eval, .. } = self else {
            return None;
        };
        let rows = spread(eval, max_contexts);
        let targets: Vec<u32> = rows
            .iter()
            .flat_map(|r| r.iter().skip(1).copied())
            .collect();
        if targets.is_empty() {
            return None;
        }
        let model = Unigram::fit(train.iter().flatten().copied(), vocab);
        Some(model.best_cross_entropy(&targets))
    }

    /// Number of training contexts (0 for synthetic data).
    pub fn train_len(&self) -> usize {
        match self {
            Batches::Corpus { train, .. } => train.len(),
            Batches::Synthetic { .. } => 0,
        }
    }
}

/// The permutation of `n` contexts used in `epoch`.
fn epoch_order(n: usize, seed: u64, epoch: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(
        seed.wrapping_add(epoch.wrapping_mul(0x2545_f491_4f6c_dd1d)),
    ));
    order
}

/// Up to `m` of `rows`, evenly spaced from the first.
fn spread(rows: &[Vec<u32>], m: usize) -> Vec<&Vec<u32>> {
    let n = rows.len();
    if m >= n {
        return rows.iter().collect();
    }
    (0..m).map(|i| &rows[i * n / m]).collect()
}

fn stack(rows: &[&Vec<u32>], device: &Device) -> Result<Tensor> {
    let t = rows.first().map_or(0, |r| r.len());
    let flat: Vec<u32> = rows.iter().flat_map(|r| r.iter().copied()).collect();
    Ok(Tensor::from_vec(flat, (rows.len(), t), device)?)
}

/// Entropy (nats per token) of the unigram distribution of `tokens`: the loss of the best model that
/// ignores context, the baseline a trained model must beat.
pub fn unigram_entropy(tokens: impl IntoIterator<Item = u32>) -> f64 {
    let mut counts = std::collections::HashMap::<u32, u64>::new();
    let mut total = 0u64;
    for t in tokens {
        *counts.entry(t).or_default() += 1;
        total += 1;
    }
    counts
        .values()
        .map(|&c| {
            let p = c as f64 / total as f64;
            -p * p.ln()
        })
        .sum()
}

/// Token counts of a training split over a vocabulary.
#[derive(Clone, Debug)]
pub struct Unigram {
    counts: Vec<u64>,
    total: u64,
}

impl Unigram {
    /// Counts `tokens`; ids at or above `vocab` widen the vocabulary to include them.
    pub fn fit(tokens: impl IntoIterator<Item = u32>, vocab: usize) -> Self {
        let mut counts = vec![0u64; vocab];
        let mut total = 0;
        for t in tokens {
            let t = t as usize;
            if t >= counts.len() {
                counts.resize(t + 1, 0);
            }
            counts[t] += 1;
            total += 1;
        }
        Self { counts, total }
    }

    /// Mean −ln p(t) over `targets` with add-α smoothing: p(t) = (c(t) + α) / (N + α V).
    pub fn cross_entropy(&self, targets: &[u32], alpha: f64) -> f64 {
        let v = self.counts.len() as f64;
        let denominator = (self.total as f64 + alpha * v).ln();
        let sum: f64 = targets
            .iter()
            .map(|&t| {
                let c = self.counts.get(t as usize).copied().unwrap_or(0) as f64;
                denominator - (c + alpha).ln()
            })
            .sum();
        sum / targets.len() as f64
    }

    /// [`Self::cross_entropy`] at the α in [1e-6, 10] that minimizes it (golden-section search
    /// on ln α; the loss is unimodal in α).
    pub fn best_cross_entropy(&self, targets: &[u32]) -> f64 {
        let f = |ln_alpha: f64| self.cross_entropy(targets, ln_alpha.exp());
        let (mut lo, mut hi) = (1e-6f64.ln(), 10f64.ln());
        let phi = (5f64.sqrt() - 1.0) / 2.0;
        let (mut a, mut b) = (hi - phi * (hi - lo), lo + phi * (hi - lo));
        let (mut fa, mut fb) = (f(a), f(b));
        for _ in 0..60 {
            if fa < fb {
                hi = b;
                (b, fb) = (a, fa);
                a = hi - phi * (hi - lo);
                fa = f(a);
            } else {
                lo = a;
                (a, fa) = (b, fb);
                b = lo + phi * (hi - lo);
                fb = f(b);
            }
        }
        fa.min(fb)
    }
}
