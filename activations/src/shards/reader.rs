//! Streams shards for training: shard order shuffled per epoch, rows shuffled in a bounded buffer,
//! deterministic for a seed; every shard is checked against the manifest before use.
use super::manifest::{Manifest, ACTIVATIONS_TENSOR, TOKENS_TENSOR};
use crate::error::{Error, Result};
use crate::gpt2::HookPoint;
use crate::source::{squeeze_single_hook, ActivationSource, ShuffleBuffer};
use candle_core::{DType, Device, Tensor};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct ReaderOptions {
    /// Memory of the shuffle buffer in bytes (of the emitted dtype); peak use is this plus one shard.
    pub buffer_bytes: usize,
    pub seed: u64,
    /// Start a new, reshuffled epoch when the shards run out.
    pub repeat: bool,
    /// dtype of the emitted activations.
    pub dtype: DType,
    pub device: Device,
    /// A subset of the stored hook points, in this order; `None` for all.
    pub hook_points: Option<Vec<HookPoint>>,
    /// Check each shard's sha256 against the manifest as it is loaded.
    pub verify: bool,
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
        }
    }
}

pub struct ShardReader {
    dir: PathBuf,
    manifest: Manifest,
    opts: ReaderOptions,
    hooks: Vec<HookPoint>,
    /// Positions of `hooks` among the stored hook points.
    hook_index: Option<Tensor>,
    order: Vec<usize>,
    next_in_order: usize,
    epoch: u64,
    rng: ChaCha8Rng,
    buffer: ShuffleBuffer,
}

impl ShardReader {
    /// Opens an extraction directory; fails at once if the manifest or any shard file is missing.
    pub fn open(dir: &Path, opts: ReaderOptions) -> Result<Self> {
        let manifest = Manifest::read(dir)?;
        manifest.shard_dtype()?;
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
        let (hooks, hook_index) = match &opts.hook_points {
            None => (manifest.hook_points.clone(), None),
            Some(want) => {
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
                    .collect::<Result<Vec<usize>>>()
                    .map(|v| v.into_iter().map(|i| i as u32).collect::<Vec<u32>>())?;
                let n = idx.len();
                (want.clone(), Some(Tensor::from_vec(idx, n, &Device::Cpu)?))
            }
        };
        let row_bytes = hooks.len() * manifest.d_model * opts.dtype.size_in_bytes();
        let buffer = ShuffleBuffer::new(opts.buffer_bytes / row_bytes.max(1), opts.seed);
        let mut rng = ChaCha8Rng::seed_from_u64(opts.seed ^ 0x5eed_5eed);
        let mut order: Vec<usize> = (0..manifest.shards.len()).collect();
        order.shuffle(&mut rng);
        Ok(Self {
            dir: dir.to_path_buf(),
            manifest,
            opts,
            hooks,
            hook_index,
            order,
            next_in_order: 0,
            epoch: 0,
            rng,
            buffer,
        })
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Completed passes over all shards.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Loads and checks one shard: rows [n_tokens, n_hooks, d] and token ids [n_tokens].
    pub fn load_shard(&self, index: usize) -> Result<(Tensor, Tensor)> {
        let info = &self.manifest.shards[index];
        let path = self.dir.join(&info.file);
        let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
        if self.opts.verify {
            let sha = super::shard_file::sha256_hex(&bytes);
            if sha != info.sha256 {
                return Err(Error::shard(
                    &path,
                    format!("sha256 {sha} differs from the manifest's {}: the file is corrupt or was replaced", info.sha256),
                ));
            }
        }
        let tensors = candle_core::safetensors::load_buffer(&bytes, &Device::Cpu)
            .map_err(|e| Error::shard(&path, format!("unreadable: {e}")))?;
        let get = |name: &str| {
            tensors
                .get(name)
                .ok_or_else(|| Error::shard(&path, format!("no `{name}` tensor")))
        };
        let acts = get(ACTIVATIONS_TENSOR)?;
        let tokens = get(TOKENS_TENSOR)?;
        let m = &self.manifest;
        let want = [info.n_tokens, m.hook_points.len(), m.d_model];
        if acts.dims() != want || acts.dtype() != m.shard_dtype()? {
            return Err(Error::shard(
                &path,
                format!(
                    "activations are {:?} {:?}; the manifest says {want:?} {}",
                    acts.dims(),
                    acts.dtype(),
                    m.dtype
                ),
            ));
        }
        if tokens.dims() != [info.n_tokens] || tokens.dtype() != DType::U32 {
            return Err(Error::shard(
                &path,
                format!(
                    "tokens are {:?} {:?}; expected [{}] u32",
                    tokens.dims(),
                    tokens.dtype(),
                    info.n_tokens
                ),
            ));
        }
        Ok((acts.clone(), tokens.clone()))
    }

    fn pull(&mut self) -> Result<Option<Tensor>> {
        if self.next_in_order >= self.order.len() {
            if !self.opts.repeat || self.order.is_empty() {
                return Ok(None);
            }
            self.epoch += 1;
            self.order.shuffle(&mut self.rng);
            self.next_in_order = 0;
        }
        let index = self.order[self.next_in_order];
        self.next_in_order += 1;
        let (acts, _) = self.load_shard(index)?;
        let acts = match &self.hook_index {
            Some(idx) => acts.index_select(idx, 1)?,
            None => acts,
        };
        Ok(Some(
            acts.to_dtype(self.opts.dtype)?
                .to_device(&self.opts.device)?,
        ))
    }
}

impl ActivationSource for ShardReader {
    fn next_batch(&mut self, n_tokens: usize) -> Result<Option<Tensor>> {
        let mut buffer = std::mem::replace(&mut self.buffer, ShuffleBuffer::new(1, 0));
        let out = buffer.next(n_tokens, || self.pull());
        self.buffer = buffer;
        out?.map(squeeze_single_hook).transpose()
    }

    fn d_model(&self) -> usize {
        self.manifest.d_model
    }

    fn hook_points(&self) -> &[HookPoint] {
        &self.hooks
    }
}
