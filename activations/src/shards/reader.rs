//! Streams shards for training without stalling it. A producer thread reads the shards of the next
//! window (`mix_shards` shards, in an order shuffled per epoch) while the current one is served, checks
//! each shard's sha256 once per process before its rows are used, deals the window's context-sized blocks
//! out in a random order (so every chunk mixes distant parts of the corpus), and uploads chunks to the
//! training device from page-locked memory on a copy stream of their own. On the device a shuffle buffer
//! permutes the rows. Every random choice comes from the seed, so the stream is the same with the
//! producer ahead of training (`prefetch > 0`) or inline (`prefetch = 0`).
//!
//! Memory: host, two windows of shards (the one served and the one loading: 2 × `mix_shards` × shard
//! bytes) plus one chunk of staging; device, the shuffle buffer (`buffer_bytes`, briefly twice that at a
//! refill) plus up to `prefetch` chunks of `chunk_tokens` rows.
use super::manifest::{Manifest, ACTIVATIONS_TENSOR, TOKENS_TENSOR};
use super::verified;
use crate::error::{Error, Result};
use crate::prefetch::{refill_depth, ChunkSource, Prefetch};
use crate::source::{ActivationSource, ShuffleBuffer, ShuffledRows};
use crate::upload::Uploader;
use candle_core::{DType, Device, Tensor};
use gpt2::HookPoint;
use rand::{seq::SliceRandom, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::{sync::Arc, thread::JoinHandle};

#[derive(Debug, Clone)]
pub struct ReaderOptions {
    /// Memory of the device shuffle buffer in bytes (of the emitted dtype).
    pub buffer_bytes: usize,
    pub seed: u64,
    /// Start a new, reshuffled epoch when the shards run out.
    pub repeat: bool,
    /// dtype of the emitted activations.
    pub dtype: DType,
    pub device: Device,
    /// A subset of the stored hook points, in this order; `None` for all.
    pub hook_points: Option<Vec<HookPoint>>,
    /// Check each shard's sha256 against the manifest (once per process) before its rows are used.
    pub verify: bool,
    /// Shards whose blocks are mixed together: the larger, the closer to a global shuffle (and the more
    /// host memory, see the module doc).
    pub mix_shards: usize,
    /// Chunks the producer thread may hold ready (at least a refill of the shuffle buffer); 0 runs it
    /// inline on the caller's thread.
    pub prefetch: usize,
    /// Rows per chunk handed to the device.
    pub chunk_tokens: usize,
}

impl Default for ReaderOptions {
    fn default() -> Self {
        Self {
            buffer_bytes: 256 << 20,
            seed: 0,
            repeat: false,
            dtype: DType::F32,
            device: Device::Cpu,
            hook_points: None,
            verify: true,
            mix_shards: 4,
            prefetch: 4,
            chunk_tokens: 8192,
        }
    }
}

/// What the producer and [`ShardReader::load_shard`] share: where the shards are and what they must hold.
struct ShardSet {
    dir: PathBuf,
    manifest: Manifest,
    dtype: DType,
    verify: bool,
    /// Shards this reader has hashed (each at most once per process, see `verified`).
    hashed: AtomicU64,
}

/// One shard's bytes, checked; its activations are `n_tokens × stored hooks × d` values at `acts`.
struct LoadedShard {
    bytes: Vec<u8>,
    acts: std::ops::Range<usize>,
    tokens: std::ops::Range<usize>,
    n_tokens: usize,
}

impl ShardSet {
    fn path(&self, index: usize) -> PathBuf {
        self.dir.join(&self.manifest.shards[index].file)
    }

    /// Reads a shard whole, checks its sha256 (unless this process has already seen these bytes) and
    /// its tensors' shapes and dtypes against the manifest.
    fn load(&self, index: usize) -> Result<LoadedShard> {
        let info = &self.manifest.shards[index];
        let path = self.path(index);
        let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
        if self.verify && verified::check(&path, &bytes, &info.sha256)? {
            self.hashed.fetch_add(1, Ordering::Relaxed);
        }
        let st = safetensors::SafeTensors::deserialize(&bytes)
            .map_err(|e| Error::shard(&path, format!("unreadable: {e}")))?;
        let range =
            |name: &str| -> Result<(safetensors::tensor::TensorView<'_>, std::ops::Range<usize>)> {
                let view = st
                    .tensor(name)
                    .map_err(|_| Error::shard(&path, format!("no `{name}` tensor")))?;
                let start = view.data().as_ptr() as usize - bytes.as_ptr() as usize;
                let len = view.data().len();
                Ok((view, start..start + len))
            };
        let m = &self.manifest;
        let (acts, acts_range) = range(ACTIVATIONS_TENSOR)?;
        let want = [info.n_tokens, m.hook_points.len(), m.d_model];
        let dtype = st_dtype(acts.dtype());
        if acts.shape() != want || dtype != Some(self.dtype) {
            return Err(Error::shard(
                &path,
                format!(
                    "activations are {:?} {:?}; the manifest says {want:?} {}",
                    acts.shape(),
                    acts.dtype(),
                    m.dtype
                ),
            ));
        }
        let (tokens, tokens_range) = range(TOKENS_TENSOR)?;
        if tokens.shape() != [info.n_tokens] || tokens.dtype() != safetensors::Dtype::U32 {
            return Err(Error::shard(
                &path,
                format!(
                    "tokens are {:?} {:?}; expected [{}] u32",
                    tokens.shape(),
                    tokens.dtype(),
                    info.n_tokens
                ),
            ));
        }
        drop(st);
        Ok(LoadedShard {
            bytes,
            acts: acts_range,
            tokens: tokens_range,
            n_tokens: info.n_tokens,
        })
    }
}

fn st_dtype(d: safetensors::Dtype) -> Option<DType> {
    match d {
        safetensors::Dtype::F32 => Some(DType::F32),
        safetensors::Dtype::BF16 => Some(DType::BF16),
        safetensors::Dtype::F16 => Some(DType::F16),
        _ => None,
    }
}

pub struct ShardReader {
    set: Arc<ShardSet>,
    hooks: Vec<HookPoint>,
    epoch: Arc<AtomicU64>,
    rows: ShuffledRows,
}

impl ShardReader {
    /// Opens an extraction directory; fails at once if the manifest or any shard file is missing.
    pub fn open(dir: &Path, opts: ReaderOptions) -> Result<Self> {
        let manifest = Manifest::read(dir)?;
        let dtype = manifest.shard_dtype()?;
        let missing: Vec<&str> = manifest
            .shards
            .iter()
            .filter(|s| !dir.join(&s.file).is_file())
            .map(|s| s.file.as_str())
            .collect();
        if !missing.is_empty() {
            return Err(Error::shard(
                dir,
                format!(
                    "{} shard(s) listed in the manifest are missing: {}",
                    missing.len(),
                    missing.join(", ")
                ),
            ));
        }
        let (hooks, hook_index) = select_hooks(dir, &manifest, opts.hook_points.as_deref())?;
        let row_bytes = hooks.len() * manifest.d_model * opts.dtype.size_in_bytes();
        let buffer_rows = opts.buffer_bytes / row_bytes.max(1);
        let buffer = ShuffleBuffer::new(buffer_rows, opts.seed);
        let block = (manifest.context_len - usize::from(manifest.drop_bos)).max(1);
        let set = Arc::new(ShardSet {
            dir: dir.to_path_buf(),
            manifest,
            dtype,
            verify: opts.verify,
            hashed: AtomicU64::new(0),
        });
        let epoch = Arc::new(AtomicU64::new(0));
        let mut rng = ChaCha8Rng::seed_from_u64(opts.seed ^ 0x5eed_5eed);
        let mut order: Vec<usize> = (0..set.manifest.shards.len()).collect();
        order.shuffle(&mut rng);
        let producer = ShardChunks {
            set: set.clone(),
            hook_index,
            out_dtype: opts.dtype,
            uploader: Uploader::new(&opts.device)?,
            rng,
            repeat: opts.repeat,
            mix: opts.mix_shards.max(1),
            block,
            chunk_tokens: opts.chunk_tokens.max(1),
            epoch: epoch.clone(),
            order,
            next_in_order: 0,
            current: None,
            ahead: None,
        };
        let depth = refill_depth(opts.prefetch, buffer_rows, opts.chunk_tokens);
        let chunks = Prefetch::new(Box::new(producer), depth, "shard-reader")?;
        Ok(Self {
            set,
            hooks,
            epoch,
            rows: ShuffledRows { chunks, buffer },
        })
    }

    pub fn manifest(&self) -> &Manifest {
        &self.set.manifest
    }

    /// Passes over all shards the producer has started beyond the first (it may run a little ahead of
    /// the rows served).
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Relaxed)
    }

    /// Shards whose sha256 this reader has computed; a shard already checked by this process is not
    /// hashed again.
    pub fn shards_hashed(&self) -> u64 {
        self.set.hashed.load(Ordering::Relaxed)
    }

    /// Loads and checks one shard: rows [n_tokens, n_hooks, d] and token ids [n_tokens], on the CPU.
    pub fn load_shard(&self, index: usize) -> Result<(Tensor, Tensor)> {
        let shard = self.set.load(index)?;
        let m = &self.set.manifest;
        let acts = Tensor::from_raw_buffer(
            &shard.bytes[shard.acts.clone()],
            self.set.dtype,
            &[shard.n_tokens, m.hook_points.len(), m.d_model],
            &Device::Cpu,
        )?;
        let tokens = Tensor::from_raw_buffer(
            &shard.bytes[shard.tokens.clone()],
            DType::U32,
            &[shard.n_tokens],
            &Device::Cpu,
        )?;
        Ok((acts, tokens))
    }
}

/// The hook points served and, for a subset, their positions among the stored ones.
fn select_hooks(
    dir: &Path,
    manifest: &Manifest,
    want: Option<&[HookPoint]>,
) -> Result<(Vec<HookPoint>, Option<Vec<usize>>)> {
    let Some(want) = want else {
        return Ok((manifest.hook_points.clone(), None));
    };
    let idx = want
        .iter()
        .map(|h| {
            manifest
                .hook_points
                .iter()
                .position(|m| m == h)
                .ok_or_else(|| {
                    Error::shard(
                        dir,
                        format!(
                            "hook point {h} is not stored (stored: {})",
                            manifest
                                .hook_points
                                .iter()
                                .map(|h| h.to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    )
                })
        })
        .collect::<Result<Vec<usize>>>()?;
    Ok((want.to_vec(), Some(idx)))
}

impl ActivationSource for ShardReader {
    fn next_batch(&mut self, n_tokens: usize) -> Result<Option<Tensor>> {
        self.rows.next_batch(n_tokens)
    }

    fn d_model(&self) -> usize {
        self.set.manifest.d_model
    }

    fn hook_points(&self) -> &[HookPoint] {
        &self.hooks
    }
}

/// A window of loaded shards and the order its blocks are dealt in.
struct Window {
    shards: Vec<LoadedShard>,
    /// (shard within the window, first row, rows).
    blocks: Vec<(usize, usize, usize)>,
    next_block: usize,
}

/// The producer: windows of shards in epoch order, blocks dealt in a random order, chunks uploaded.
struct ShardChunks {
    set: Arc<ShardSet>,
    hook_index: Option<Vec<usize>>,
    out_dtype: DType,
    uploader: Uploader,
    rng: ChaCha8Rng,
    repeat: bool,
    mix: usize,
    block: usize,
    chunk_tokens: usize,
    epoch: Arc<AtomicU64>,
    order: Vec<usize>,
    next_in_order: usize,
    current: Option<Window>,
    ahead: Option<JoinHandle<Result<Vec<LoadedShard>>>>,
}

impl ShardChunks {
    /// The shards of the next window in order (a new, reshuffled epoch when `repeat` and the shards ran
    /// out), or `None` at the end. A window never spans two epochs.
    fn plan_window(&mut self) -> Option<Vec<usize>> {
        if self.next_in_order >= self.order.len() {
            if !self.repeat || self.order.is_empty() {
                return None;
            }
            self.epoch.fetch_add(1, Ordering::Relaxed);
            self.order.shuffle(&mut self.rng);
            self.next_in_order = 0;
        }
        let end = (self.next_in_order + self.mix).min(self.order.len());
        let shards = self.order[self.next_in_order..end].to_vec();
        self.next_in_order = end;
        Some(shards)
    }

    /// Starts loading the next window's shards, each on a thread of its own.
    fn start_loading(&mut self) {
        if let Some(indices) = self.plan_window() {
            let set = self.set.clone();
            self.ahead = Some(std::thread::spawn(move || {
                std::thread::scope(|s| {
                    let loads: Vec<_> = indices
                        .iter()
                        .map(|&i| {
                            let set = &set;
                            s.spawn(move || set.load(i))
                        })
                        .collect();
                    loads
                        .into_iter()
                        .map(|h| {
                            h.join().unwrap_or_else(|_| {
                                Err(Error::shard(&set.dir, "a shard-loading thread panicked"))
                            })
                        })
                        .collect()
                })
            }));
        }
    }

    /// Makes the loaded window current, with its blocks in a random order, and starts the next one.
    fn advance(&mut self) -> Result<bool> {
        if self.ahead.is_none() && self.current.is_none() {
            self.start_loading();
        }
        let Some(loading) = self.ahead.take() else {
            self.current = None;
            return Ok(false);
        };
        let shards = loading
            .join()
            .map_err(|_| Error::shard(&self.set.dir, "the shard-loading thread panicked"))??;
        let mut blocks = Vec::new();
        for (s, shard) in shards.iter().enumerate() {
            let mut row = 0;
            while row < shard.n_tokens {
                let len = self.block.min(shard.n_tokens - row);
                blocks.push((s, row, len));
                row += len;
            }
        }
        blocks.shuffle(&mut self.rng);
        self.current = Some(Window {
            shards,
            blocks,
            next_block: 0,
        });
        self.start_loading();
        Ok(true)
    }
}

impl ChunkSource for ShardChunks {
    fn next_chunk(&mut self) -> Result<Option<Tensor>> {
        while self
            .current
            .as_ref()
            .is_none_or(|w| w.next_block >= w.blocks.len())
        {
            if !self.advance()? {
                return Ok(None);
            }
        }
        let Some(window) = self.current.as_mut() else {
            return Ok(None);
        };
        let mut take = Vec::new();
        let mut rows = 0;
        while window.next_block < window.blocks.len() && rows < self.chunk_tokens {
            let b = window.blocks[window.next_block];
            take.push(b);
            rows += b.2;
            window.next_block += 1;
        }
        let m = &self.set.manifest;
        let elem = self.set.dtype.size_in_bytes();
        let stored = m.hook_points.len();
        let d_bytes = m.d_model * elem;
        let row_bytes = stored * d_bytes;
        let hooks = self.hook_index.as_ref().map_or(stored, |h| h.len());
        let shards = &window.shards;
        let hook_index = self.hook_index.as_deref();
        let chunk = self
            .uploader
            .upload(self.set.dtype, &[rows, hooks, m.d_model], |out| {
                let mut at = 0;
                for &(s, row, len) in &take {
                    let shard = &shards[s];
                    let src = &shard.bytes[shard.acts.start + row * row_bytes..][..len * row_bytes];
                    match hook_index {
                        None => {
                            out[at..at + src.len()].copy_from_slice(src);
                            at += src.len();
                        }
                        Some(idx) => {
                            for r in src.chunks_exact(row_bytes) {
                                for &h in idx {
                                    out[at..at + d_bytes]
                                        .copy_from_slice(&r[h * d_bytes..(h + 1) * d_bytes]);
                                    at += d_bytes;
                                }
                            }
                        }
                    }
                }
            })?;
        Ok(Some(chunk.to_dtype(self.out_dtype)?))
    }
}
