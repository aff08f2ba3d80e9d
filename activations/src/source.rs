//! Where training gets activations: one trait, served from shards on disk ([`crate::shards::ShardReader`])
//! or straight from the model ([`OnTheFly`]).
use crate::prefetch::{refill_depth, ChunkSource, Prefetch};
use crate::{corpus::Contexts, error::Result};
use candle_core::{DType, Device, Tensor};
use gpt2::HookPoint;
use models::Model;
use rand::{seq::SliceRandom, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

/// A stream of residual-stream activations.
pub trait ActivationSource {
    /// The next `n_tokens` activations: [n, d_model] for one hook point, [n, n_hooks, d_model]
    /// for several (in [`Self::hook_points`] order). Fewer rows only when the data runs out;
    /// `None` once it has.
    fn next_batch(&mut self, n_tokens: usize) -> Result<Option<Tensor>>;

    fn d_model(&self) -> usize;

    fn hook_points(&self) -> &[HookPoint];
}

/// The hook points' activations for a batch of contexts, as rows [B * T', n_hooks, d] with the
/// matching token ids [B * T'] (T' = T - 1 when `drop_first` drops each context's first position).
pub fn hook_rows(
    model: &Model,
    tokens: &Tensor,
    hooks: &[HookPoint],
    drop_first: bool,
) -> Result<(Tensor, Tensor)> {
    let acts = model.forward_hooks(tokens, hooks)?;
    let stacked = Tensor::stack(&acts, 2)?; // [B, T, H, d]
    let (b, t, h, d) = stacked.dims4()?;
    let skip = usize::from(drop_first);
    let rows = stacked
        .narrow(1, skip, t - skip)?
        .reshape((b * (t - skip), h, d))?;
    let ids = tokens.narrow(1, skip, t - skip)?.flatten_all()?;
    Ok((rows, ids))
}

/// A bounded shuffle buffer of rows. It emits half of its capacity between refills and mixes
/// the rest with the next fresh rows, so rows from different chunks interleave.
pub struct ShuffleBuffer {
    capacity: usize,
    rows: Option<Tensor>,
    cursor: usize,
    rng: ChaCha8Rng,
}

impl ShuffleBuffer {
    /// `capacity` rows (at least 1), shuffled with a generator seeded by `seed`.
    pub fn new(capacity: usize, seed: u64) -> Self {
        Self {
            capacity: capacity.max(1),
            rows: None,
            cursor: 0,
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    fn remaining(&self) -> usize {
        self.rows.as_ref().map_or(0, |r| r.dim(0).unwrap_or(0)) - self.cursor
    }

    /// Up to `n` shuffled rows, refilling from `pull` (which returns `None` when exhausted).
    pub fn next(
        &mut self,
        n: usize,
        mut pull: impl FnMut() -> Result<Option<Tensor>>,
    ) -> Result<Option<Tensor>> {
        if self.remaining() < n.max(self.capacity / 2) {
            let mut parts = Vec::new();
            if let Some(rows) = &self.rows {
                if self.remaining() > 0 {
                    parts.push(rows.narrow(0, self.cursor, self.remaining())?);
                }
            }
            let mut filled = self.remaining();
            let mut pulled = false;
            while filled < self.capacity.max(n) {
                match pull()? {
                    Some(chunk) => {
                        filled += chunk.dim(0)?;
                        parts.push(chunk);
                        pulled = true;
                    }
                    None => break,
                }
            }
            if pulled {
                let all = Tensor::cat(&parts, 0)?;
                let mut perm: Vec<u32> = (0..all.dim(0)? as u32).collect();
                perm.shuffle(&mut self.rng);
                let perm = Tensor::from_vec(perm, all.dim(0)?, all.device())?;
                self.rows = Some(all.index_select(&perm, 0)?);
                self.cursor = 0;
            }
        }
        let take = n.min(self.remaining());
        if take == 0 {
            return Ok(None);
        }
        let rows = self
            .rows
            .as_ref()
            .map(|r| r.narrow(0, self.cursor, take))
            .transpose()?;
        self.cursor += take;
        Ok(rows)
    }
}

/// Squeezes [n, 1, d] to [n, d]; several hooks stay [n, H, d].
fn squeeze_single_hook(rows: Tensor) -> Result<Tensor> {
    Ok(if rows.dim(1)? == 1 {
        rows.squeeze(1)?
    } else {
        rows
    })
}

/// Chunks from a producer thread, dealt out through a shuffle buffer: the batches of every source.
pub(crate) struct ShuffledRows {
    pub(crate) chunks: Prefetch,
    pub(crate) buffer: ShuffleBuffer,
}

impl ShuffledRows {
    /// Up to `n_tokens` rows, [n, d] for one hook point and [n, H, d] for several.
    pub(crate) fn next_batch(&mut self, n_tokens: usize) -> Result<Option<Tensor>> {
        let chunks = &mut self.chunks;
        self.buffer
            .next(n_tokens, || chunks.pull())?
            .map(squeeze_single_hook)
            .transpose()
    }
}

/// Options of [`OnTheFly`].
#[derive(Debug, Clone)]
pub struct OnTheFlyOptions {
    /// Contexts per forward pass.
    pub batch_contexts: usize,
    /// Drop each context's first position (the BOS token, whose activations are outliers).
    pub drop_bos: bool,
    /// Shuffle-buffer capacity in tokens.
    pub buffer_tokens: usize,
    pub seed: u64,
    /// Start over when the contexts run out (an endless stream).
    pub repeat: bool,
    /// dtype of the emitted activations.
    pub dtype: DType,
    /// Visit the contexts in a random order, reshuffled every epoch, rather than in corpus order: each
    /// forward batch then mixes distant parts of the corpus, which a bounded shuffle buffer alone cannot.
    pub shuffle_contexts: bool,
    /// Forward batches the producer thread may run ahead of training (at least a refill of the shuffle
    /// buffer); 0 runs the model inline.
    pub prefetch: usize,
}

impl Default for OnTheFlyOptions {
    fn default() -> Self {
        Self {
            batch_contexts: 8,
            drop_bos: true,
            buffer_tokens: 1 << 14,
            seed: 0,
            repeat: false,
            dtype: DType::F32,
            shuffle_contexts: true,
            prefetch: 2,
        }
    }
}

/// Runs the model on the corpus and feeds activations straight to training, through a shuffle
/// buffer on the model's device; nothing touches the disk. The forward passes run on a producer
/// thread ahead of training (on CUDA they queue on the device while the training step runs).
pub struct OnTheFly {
    device: Device,
    d_model: usize,
    hooks: Vec<HookPoint>,
    rows: ShuffledRows,
}

impl OnTheFly {
    pub fn new(
        model: Arc<Model>,
        contexts: Contexts,
        hooks: Vec<HookPoint>,
        opts: OnTheFlyOptions,
    ) -> Result<Self> {
        for h in &hooks {
            h.validate(model.n_layer())?;
        }
        if hooks.is_empty() {
            return Err(crate::Error::config(
                "hook_points",
                "at least one is needed",
            ));
        }
        if contexts.is_empty() {
            return Err(crate::Error::config(
                "corpus",
                "no complete context of tokens",
            ));
        }
        let buffer = ShuffleBuffer::new(opts.buffer_tokens, opts.seed);
        let device = model.device().clone();
        let d_model = model.d_model();
        let mut rng = ChaCha8Rng::seed_from_u64(opts.seed ^ 0xc0_47e7);
        let mut order: Vec<u32> = (0..contexts.len() as u32).collect();
        if opts.shuffle_contexts {
            order.shuffle(&mut rng);
        }
        let kept = contexts
            .context_len
            .saturating_sub(usize::from(opts.drop_bos))
            .max(1);
        let chunk_rows = opts.batch_contexts.max(1) * kept;
        let producer = ModelChunks {
            model,
            contexts,
            hooks: hooks.clone(),
            order,
            next: 0,
            rng,
            opts: opts.clone(),
        };
        let depth = refill_depth(opts.prefetch, opts.buffer_tokens, chunk_rows);
        let chunks = Prefetch::new(Box::new(producer), depth, "model-forward")?;
        Ok(Self {
            device,
            d_model,
            hooks,
            rows: ShuffledRows { chunks, buffer },
        })
    }

    pub fn device(&self) -> &Device {
        &self.device
    }
}

/// The producer: batches of contexts in (shuffled) order through the model.
struct ModelChunks {
    model: Arc<Model>,
    contexts: Contexts,
    hooks: Vec<HookPoint>,
    order: Vec<u32>,
    next: usize,
    rng: ChaCha8Rng,
    opts: OnTheFlyOptions,
}

impl ChunkSource for ModelChunks {
    fn next_chunk(&mut self) -> Result<Option<Tensor>> {
        let n_ctx = self.order.len();
        if self.next >= n_ctx {
            if !self.opts.repeat {
                return Ok(None);
            }
            if self.opts.shuffle_contexts {
                self.order.shuffle(&mut self.rng);
            }
            self.next = 0;
        }
        let b = self.opts.batch_contexts.max(1).min(n_ctx - self.next);
        let t = self.contexts.context_len;
        let ids: Vec<u32> = self.order[self.next..self.next + b]
            .iter()
            .flat_map(|&c| self.contexts.context(c as usize).iter().copied())
            .collect();
        self.next += b;
        let tokens = Tensor::from_vec(ids, (b, t), self.model.device())?;
        let (rows, _) = hook_rows(&self.model, &tokens, &self.hooks, self.opts.drop_bos)?;
        Ok(Some(rows.to_dtype(self.opts.dtype)?))
    }
}

impl ActivationSource for OnTheFly {
    fn next_batch(&mut self, n_tokens: usize) -> Result<Option<Tensor>> {
        self.rows.next_batch(n_tokens)
    }

    fn d_model(&self) -> usize {
        self.d_model
    }

    fn hook_points(&self) -> &[HookPoint] {
        &self.hooks
    }
}
