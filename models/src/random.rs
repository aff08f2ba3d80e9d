//! Random weights of a real shape, for benchmarks without the checkpoint: a variable source that
//! makes each tensor when a family asks for it by name, so only the blocks read are made.
use candle_core::{DType, Device, Result, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::{Init, VarBuilder};
use rand::SeedableRng;
use rand_distr::Distribution;

const WEIGHT_STD: f32 = 0.02;

struct RandomWeights {
    seed: u64,
}

/// A stable per-name seed, so a tensor does not depend on which others were made before it.
fn name_seed(seed: u64, name: &str) -> u64 {
    name.bytes().fold(seed ^ 0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl SimpleBackend for RandomWeights {
    fn get(&self, s: Shape, name: &str, _: Init, dtype: DType, dev: &Device) -> Result<Tensor> {
        let is_norm = name.contains("norm") || name.contains("ln");
        if name.ends_with(".bias") {
            return Tensor::zeros(s, dtype, dev);
        }
        if is_norm {
            return Tensor::ones(s, dtype, dev);
        }
        if !dev.is_cpu() {
            return Tensor::randn(0f32, WEIGHT_STD, s, dev)?.to_dtype(dtype);
        }
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(name_seed(self.seed, name));
        let normal = rand_distr::Normal::new(0f32, WEIGHT_STD)
            .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        let values: Vec<f32> = (0..s.elem_count())
            .map(|_| normal.sample(&mut rng))
            .collect();
        Tensor::from_vec(values, s, dev)?.to_dtype(dtype)
    }

    fn get_unchecked(&self, name: &str, _: DType, _: &Device) -> Result<Tensor> {
        candle_core::bail!("random weights: `{name}` has no shape to make it with")
    }

    /// Untied output heads and unprefixed names are what the shapes use.
    fn contains_tensor(&self, name: &str) -> bool {
        name == "lm_head.weight"
    }
}

/// A variable source of random weights seeded by `seed` (on CUDA: the device's generator,
/// seeded with `seed`).
pub fn random_weights(seed: u64, dtype: DType, device: &Device) -> Result<VarBuilder<'static>> {
    if !device.is_cpu() {
        device.set_seed(seed)?;
    }
    Ok(VarBuilder::from_backend(
        Box::new(RandomWeights { seed }),
        dtype,
        device.clone(),
    ))
}
