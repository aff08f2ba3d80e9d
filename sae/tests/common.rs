#![allow(dead_code)]
use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng};

pub fn randn(shape: &[usize], seed: u64) -> Tensor {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|_| rng.random::<f32>() * 2.0 - 1.0).collect();
    Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
}

pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

/// A synthetic-data config for quick runs.
pub fn synthetic_config(arch: &str, extra_sae: &str, layers: usize) -> String {
    format!(
        r#"
name = "test"
seed = 7
[data]
source = "synthetic"
d_model = 16
layers = {layers}
features = 64
active_per_token = 3
held_out_tokens = 256
[sae]
arch = "{arch}"
latents = 64
k = 4
{extra_sae}
[sae.aux]
dead_tokens = 512
[train]
batch_size = 64
steps = 12
lr = 3e-3
warmup_steps = 2
checkpoint_every = 6
[log]
every = 3
progress = false
"#
    )
}

/// Runs train-sae on `text` written to `dir/cfg.toml`, into `dir/run` (resumed with `resume`).
pub fn run(dir: &std::path::Path, text: &str, resume: bool) -> sae::run::RunSummary {
    let cfg = dir.join("cfg.toml");
    std::fs::write(&cfg, text).unwrap();
    sae::run::train_sae(&sae::run::RunOptions {
        config: cfg,
        out: Some(dir.join("run")),
        resume,
        ..Default::default()
    })
    .unwrap()
}

/// The exported SAELens weights of the run in `dir/run`.
pub fn weights(dir: &std::path::Path) -> std::collections::HashMap<String, Tensor> {
    sae::checkpoint::read_saelens(&dir.join("run/sae"))
        .unwrap()
        .1
}
