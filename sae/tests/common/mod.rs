#![allow(dead_code)]
use candle_core::{DType, Device, Tensor};
use rand::{Rng, SeedableRng};

pub fn randn(shape: &[usize], seed: u64) -> Tensor {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|_| rng.random::<f32>() * 2.0 - 1.0).collect();
    Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
}

/// Uniform in [-1, 1), `len` values on `dev`.
pub fn uniform(len: usize, seed: u64, dev: &Device) -> anyhow::Result<Tensor> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let v: Vec<f32> = (0..len).map(|_| rng.random::<f32>() * 2.0 - 1.0).collect();
    Ok(Tensor::from_vec(v, len, dev)?)
}

pub fn host(t: &Tensor) -> anyhow::Result<Vec<f64>> {
    Ok(t.to_dtype(DType::F64)?.flatten_all()?.to_vec1()?)
}

pub fn max_err(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

/// The training forward pass of `sae` on `x` (Prof-K, seed 0) and the aux-k loss of its `dead` latents,
/// against `recon` (the forward's own reconstruction when None).
pub fn forward_and_aux(
    sae: &sae::Sae,
    x: &Tensor,
    recon: Option<&Tensor>,
    dead: (&Tensor, usize),
    k_aux: usize,
    form: sae::config::AuxDecode,
) -> anyhow::Result<(sae::model::Forward, Tensor)> {
    let fwd = sae::arch::forward(sae, x, profk::Selector::Profk, 0)?;
    let aux = sae::aux::aux_loss(
        sae,
        &fwd.enc,
        fwd.enc.scores.clone(),
        x,
        recon.unwrap_or(&fwd.recon),
        dead,
        k_aux,
        form,
        (profk::Selector::Profk, 0),
        None,
    )?
    .expect("dead latents");
    Ok((fwd, aux))
}

/// A one-layer BatchTopK shape.
pub fn batchtopk_shape(d_model: usize, n: usize, k: usize) -> sae::model::Shape {
    sae::model::Shape {
        arch: sae::config::Arch::Batchtopk,
        d_model,
        layers: 1,
        n,
        k,
        groups: vec![],
    }
}

/// Largest |a - b|; a NaN difference fails.
pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    let (a, b) = (host(a).unwrap(), host(b).unwrap());
    assert!(
        a.iter().zip(&b).all(|(x, y)| !(x - y).is_nan()),
        "NaN in the difference"
    );
    max_err(&a, &b) as f32
}

/// The exported weights of the runs in `a/run` and `b/run` are equal bit for bit.
pub fn assert_same_weights(a: &std::path::Path, b: &std::path::Path, what: &str) {
    let (wa, wb) = (weights(a), weights(b));
    for name in ["W_enc", "b_enc", "W_dec", "b_dec", "threshold"] {
        assert_eq!(
            max_abs_diff(&wa[name], &wb[name]),
            0.0,
            "{what}: {name} differs"
        );
    }
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

/// The exported SAELens weights of the run in `dir/run` (its one SAE in the Hub layout of `run/sae`).
pub fn weights(dir: &std::path::Path) -> std::collections::HashMap<String, Tensor> {
    let sae = sae::hub::find_sae(&dir.join("run/sae")).unwrap();
    sae::checkpoint::read_saelens(&sae).unwrap().1
}

/// configs/tiny.toml shrunk to a few quick steps, with `edits` (from, to) applied after; every `from` must
/// still be in the file.
pub fn quick_tiny_config(edits: &[(&str, &str)]) -> String {
    let mut text = std::fs::read_to_string("../configs/tiny.toml").unwrap();
    let quick = [
        ("steps = 600", "steps = 4"),
        ("batch_size = 1024", "batch_size = 256"),
        ("held_out_tokens = 4096", "held_out_tokens = 512"),
        ("buffer_tokens = 65536", "buffer_tokens = 1024"),
        ("latents = 1024", "latents = 256"),
        ("compare_every = 100", "compare_every = 2"),
        ("every = 10", "every = 2\nprogress = false"),
    ];
    for (from, to) in quick.iter().chain(edits) {
        assert!(
            text.contains(from),
            "configs/tiny.toml no longer has {from}"
        );
        text = text.replace(from, to);
    }
    text
}

/// The metrics of every run's final eval on a model: reconstruction and CE loss recovered.
pub const FINAL_EVAL_KEYS: [&str; 6] = [
    "heldout_fvu",
    "heldout_l0",
    "ce_clean",
    "ce_sae",
    "ce_zero_ablation",
    "ce_loss_recovered",
];
