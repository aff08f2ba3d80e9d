//! Activation batches for training: helpers over `activations::ActivationSource` and a synthetic source.
use crate::Result;
use activations::ActivationSource;
use candle_core::{Device, Tensor};
use gpt2::HookPoint;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};

/// Reads and drops `tokens` activations in chunks of `batch` (the data position of a resumed run).
pub fn skip(source: &mut dyn ActivationSource, tokens: u64, batch: usize) -> Result<()> {
    let mut left = tokens;
    while left > 0 {
        let take = left.min(batch as u64) as usize;
        if source.next_batch(take)?.is_none() {
            break;
        }
        left -= take as u64;
    }
    Ok(())
}

/// A batch as [tokens, layers, d_model]: a single hook point's [tokens, d] gains the layer axis.
pub fn with_layer_axis(batch: Tensor) -> Result<Tensor> {
    Ok(match batch.rank() {
        2 => batch.unsqueeze(1)?,
        3 => batch,
        r => {
            return Err(crate::Error::Data(format!(
                "activation batch of rank {r}; expected 2 or 3"
            )))
        }
    })
}

/// Each token is a sum of `active` random unit features (of `features`) with exponential magnitudes, plus a
/// fixed offset: data with a known sparse dictionary.
pub struct Synthetic {
    d_model: usize,
    layers: usize,
    features: Vec<f32>,
    offset: Vec<f32>,
    n_features: usize,
    active: usize,
    rng: ChaCha8Rng,
    device: Device,
}

impl Synthetic {
    /// The dictionary depends on `dictionary_seed`; the token stream on `stream_seed`.
    pub fn new(
        d_model: usize,
        layers: usize,
        n_features: usize,
        active: usize,
        dictionary_seed: u64,
        stream_seed: u64,
        device: &Device,
    ) -> Self {
        let dim = d_model * layers;
        let mut rng = ChaCha8Rng::seed_from_u64(dictionary_seed);
        let mut features: Vec<f32> = (0..n_features * dim)
            .map(|_| StandardNormal.sample(&mut rng))
            .collect();
        for f in features.chunks_mut(dim.max(1)) {
            let norm = f.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
            f.iter_mut().for_each(|v| *v /= norm);
        }
        let offset = (0..dim)
            .map(|_| 0.5 * Distribution::<f32>::sample(&StandardNormal, &mut rng))
            .collect();
        Self {
            d_model,
            layers,
            features,
            offset,
            n_features,
            active,
            rng: ChaCha8Rng::seed_from_u64(stream_seed),
            device: device.clone(),
        }
    }
}

impl ActivationSource for Synthetic {
    fn d_model(&self) -> usize {
        self.d_model
    }
    fn hook_points(&self) -> &[HookPoint] {
        &[]
    }
    /// Always [tokens, layers, d_model].
    fn next_batch(&mut self, tokens: usize) -> activations::Result<Option<Tensor>> {
        let dim = self.d_model * self.layers;
        let mut out = Vec::with_capacity(tokens * dim);
        for _ in 0..tokens {
            let mut x = self.offset.clone();
            for _ in 0..self.active {
                let f = self.rng.random_range(0..self.n_features);
                let mag = -(1.0 - self.rng.random::<f32>()).ln();
                for (o, v) in x.iter_mut().zip(&self.features[f * dim..(f + 1) * dim]) {
                    *o += mag * v;
                }
            }
            out.extend(x);
        }
        Ok(Some(Tensor::from_vec(
            out,
            (tokens, self.layers, self.d_model),
            &self.device,
        )?))
    }
}
