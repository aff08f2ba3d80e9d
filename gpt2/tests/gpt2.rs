//! The candle GPT-2 against the independent float64 reference (tools/gpt2_reference.py), and
//! loading from every supported layout.
mod common;

use candle_core::{DType, Device, Tensor};
use common::randn;
use gpt2::{locate, Gpt2, Gpt2Config, HookPoint};
use runtime::test_device;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn fixture() -> PathBuf {
    runtime::workspace_file("gpt2/tests/fixtures/gpt2-ref")
}

fn reference() -> HashMap<String, Tensor> {
    candle_core::safetensors::load(fixture().join("reference.safetensors"), &Device::Cpu).unwrap()
}

/// Largest |a - b| / (1 + |b|).
fn max_rel_err(a: &Tensor, b: &Tensor) -> f32 {
    assert_eq!(a.dims(), b.dims());
    let a = a.to_dtype(DType::F32).unwrap().flatten_all().unwrap();
    let b = b.to_dtype(DType::F32).unwrap().flatten_all().unwrap();
    let den = (b.abs().unwrap() + 1.0).unwrap();
    let err = ((a - &b).unwrap().abs().unwrap() / den).unwrap();
    err.max(0).unwrap().to_scalar::<f32>().unwrap()
}

fn all_hooks(n_layer: usize) -> Vec<HookPoint> {
    let mut hooks: Vec<HookPoint> = (0..n_layer)
        .flat_map(|l| [HookPoint::ResidPre(l), HookPoint::ResidPost(l)])
        .collect();
    hooks.push(HookPoint::LnFinal);
    hooks
}

test_device!(
    forward_matches_float64_reference,
    forward_matches_float64_reference_on
);
fn forward_matches_float64_reference_on(device: &Device) -> anyhow::Result<()> {
    let device = device.clone();
    forward_matches_reference_on(&device);
    Ok(())
}

fn forward_matches_reference_on(device: &Device) {
    let model = Gpt2::load(fixture().to_str().unwrap(), DType::F32, device).unwrap();
    let r = reference();
    let tokens = &r["tokens"].to_device(device).unwrap();
    let hooks = all_hooks(model.config().n_layer);
    let acts = model.forward_hooks(tokens, &hooks).unwrap();
    for (h, a) in hooks.iter().zip(&acts) {
        let key = match h {
            HookPoint::ResidPre(l) => format!("resid_pre.{l}"),
            HookPoint::ResidPost(l) => format!("resid_post.{l}"),
            HookPoint::LnFinal => "ln_final".into(),
            other => panic!("{other}: GPT-2 exposes residual hook points only"),
        };
        let err = max_rel_err(&a.to_device(&Device::Cpu).unwrap(), &r[&key]);
        assert!(err < 1e-5, "{device:?} {h}: error {err}");
    }
    let logits = model
        .forward_logits(tokens)
        .unwrap()
        .to_device(&Device::Cpu)
        .unwrap();
    let err = max_rel_err(&logits, &r["logits"]);
    assert!(err < 1e-5, "{device:?} logits: error {err}");

    // Chunked causal attention (uneven last chunk) computes the same function.
    for chunk in [1, 5, 64] {
        let mut chunked = Gpt2::load(fixture().to_str().unwrap(), DType::F32, device).unwrap();
        chunked.set_attention_chunk(Some(chunk));
        let out = chunked.forward_logits(tokens).unwrap();
        let err = max_rel_err(&out.to_device(&Device::Cpu).unwrap(), &r["logits"]);
        assert!(err < 1e-5, "{device:?} chunk {chunk}: error {err}");
    }

    // Identity patch changes nothing; a zero patch changes the logits.
    let hook = HookPoint::ResidPost(0);
    let same = model
        .forward_logits_patched(tokens, hook, &|x: &Tensor| Ok(x.clone()))
        .unwrap()
        .to_device(&Device::Cpu)
        .unwrap();
    assert_eq!(max_rel_err(&same, &logits), 0.0);
    let zeroed = model
        .forward_logits_patched(tokens, hook, &|x: &Tensor| x.zeros_like())
        .unwrap()
        .to_device(&Device::Cpu)
        .unwrap();
    assert!(max_rel_err(&zeroed, &logits) > 1e-2);
}

#[test]
fn half_precision_stays_close() {
    let r = reference();
    for dtype in [DType::BF16, DType::F16] {
        let model = Gpt2::load(fixture().to_str().unwrap(), dtype, &Device::Cpu).unwrap();
        let out = model
            .forward_hooks(&r["tokens"], &[HookPoint::ResidPost(1)])
            .unwrap();
        assert_eq!(out[0].dtype(), dtype);
        let err = max_rel_err(&out[0], &r["resid_post.1"]);
        assert!(err < 5e-2, "{dtype:?}: error {err}");
    }
}

fn copy_fixture_to(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(fixture().join(f), dir.join(f)).unwrap();
    }
}

#[test]
fn loads_from_hf_cache_and_explains_a_missing_model() {
    let cache = tempfile::tempdir().unwrap();
    let repo = cache.path().join("models--openai-community--gpt2");
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), "0123abcd\n").unwrap();
    copy_fixture_to(&repo.join("snapshots/0123abcd"));
    std::env::set_var("HF_HUB_CACHE", cache.path());
    let files = locate("gpt2").unwrap();
    assert!(files.config.starts_with(repo.join("snapshots/0123abcd")));
    let model = Gpt2::load("openai-community/gpt2", DType::F32, &Device::Cpu).unwrap();
    let r = reference();
    let logits = model.forward_logits(&r["tokens"]).unwrap();
    assert!(max_rel_err(&logits, &r["logits"]) < 1e-5);

    let err = Gpt2::load("gpt2-xl", DType::F32, &Device::Cpu)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("gpt2-xl") && err.contains("models--gpt2-xl/refs/main"),
        "{err}"
    );
    assert!(
        err.contains("HF_HUB_CACHE") && err.contains("hf-hub"),
        "{err}"
    );
}

#[test]
fn loads_prefixed_and_sharded_checkpoints() {
    let r = reference();
    let weights =
        candle_core::safetensors::load(fixture().join("model.safetensors"), &Device::Cpu).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // transformer.-prefixed names split over two files with an index.
    let mut index = serde_json::Map::new();
    let (mut a, mut b) = (HashMap::new(), HashMap::new());
    for (i, (name, t)) in weights.iter().enumerate() {
        let (file, part) = if i % 2 == 0 {
            ("model-00001-of-00002.safetensors", &mut a)
        } else {
            ("model-00002-of-00002.safetensors", &mut b)
        };
        part.insert(format!("transformer.{name}"), t.clone());
        index.insert(format!("transformer.{name}"), file.into());
    }
    candle_core::safetensors::save(&a, dir.path().join("model-00001-of-00002.safetensors"))
        .unwrap();
    candle_core::safetensors::save(&b, dir.path().join("model-00002-of-00002.safetensors"))
        .unwrap();
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        serde_json::json!({ "metadata": {}, "weight_map": index }).to_string(),
    )
    .unwrap();
    std::fs::copy(
        fixture().join("config.json"),
        dir.path().join("config.json"),
    )
    .unwrap();
    let model = Gpt2::load(dir.path().to_str().unwrap(), DType::F32, &Device::Cpu).unwrap();
    let logits = model.forward_logits(&r["tokens"]).unwrap();
    assert!(max_rel_err(&logits, &r["logits"]) < 1e-5);

    // A missing shard and a wrong shape are named.
    std::fs::remove_file(dir.path().join("model-00002-of-00002.safetensors")).unwrap();
    let err = Gpt2::load(dir.path().to_str().unwrap(), DType::F32, &Device::Cpu)
        .unwrap_err()
        .to_string();
    assert!(err.contains("model-00002-of-00002.safetensors"), "{err}");
    let bad = tempfile::tempdir().unwrap();
    copy_fixture_to(bad.path());
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(bad.path().join("config.json")).unwrap())
            .unwrap();
    cfg["n_embd"] = 64.into();
    std::fs::write(bad.path().join("config.json"), cfg.to_string()).unwrap();
    let err = Gpt2::load(bad.path().to_str().unwrap(), DType::F32, &Device::Cpu)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("model.safetensors") && err.contains("shape"),
        "{err}"
    );
}

fn small_config() -> Gpt2Config {
    Gpt2Config {
        vocab_size: 64,
        n_positions: 16,
        n_embd: 16,
        n_layer: 3,
        n_head: 2,
        layer_norm_epsilon: 1e-5,
    }
}

#[test]
fn save_hf_round_trips_and_random_is_deterministic() {
    let model = Gpt2::random(small_config(), 7, DType::F32, &Device::Cpu).unwrap();
    let again = Gpt2::random(small_config(), 7, DType::F32, &Device::Cpu).unwrap();
    let tokens = Tensor::new(&[[1u32, 5, 9, 63, 0, 2]], &Device::Cpu).unwrap();
    let l1 = model.forward_logits(&tokens).unwrap();
    assert_eq!(
        max_rel_err(&again.forward_logits(&tokens).unwrap(), &l1),
        0.0
    );
    let dir = tempfile::tempdir().unwrap();
    model.save_hf(dir.path()).unwrap();
    let loaded = Gpt2::load(dir.path().to_str().unwrap(), DType::F32, &Device::Cpu).unwrap();
    assert_eq!(loaded.config(), model.config());
    assert_eq!(
        max_rel_err(&loaded.forward_logits(&tokens).unwrap(), &l1),
        0.0
    );
    // Stopping early gives the same stream as running everything.
    let early = model
        .forward_hooks(&tokens, &[HookPoint::ResidPre(1)])
        .unwrap();
    let full = model
        .forward_hooks(&tokens, &[HookPoint::LnFinal, HookPoint::ResidPost(0)])
        .unwrap();
    assert_eq!(max_rel_err(&early[0], &full[1]), 0.0);
    assert!(model
        .forward_hooks(&tokens, &[HookPoint::ResidPost(3)])
        .is_err());
}

#[test]
fn varmap_copy_is_trainable() {
    let model = Gpt2::random(small_config(), 3, DType::F32, &Device::Cpu).unwrap();
    let varmap = candle_nn::VarMap::new();
    let trainable = model.to_varmap(&varmap).unwrap();
    let tokens = Tensor::new(&[[1u32, 5, 9, 63, 0, 2], [3, 3, 4, 4, 5, 5]], &Device::Cpu).unwrap();
    let l0 = model.forward_logits(&tokens).unwrap();
    let logits = trainable.forward_logits(&tokens).unwrap();
    assert!(max_rel_err(&logits, &l0) < 1e-5);
    let loss = Gpt2::next_token_loss(&logits, &tokens).unwrap();
    let grads = loss.backward().unwrap();
    let vars = varmap.all_vars();
    assert_eq!(vars.len(), model.named_tensors().len());
    assert!(vars.iter().all(|v| grads.get(v.as_tensor()).is_some()));
}

// Directional derivatives of the training loss along a random direction per weight tensor: the
// gradient of the fused training ops against finite differences of the loss, for every tensor
// (a gradient that is missing, misrouted or mis-scaled anywhere in the block fails its tensor's check).
test_device!(
    training_gradients_match_finite_differences,
    training_gradients_match_finite_differences_on
);
fn training_gradients_match_finite_differences_on(device: &Device) -> anyhow::Result<()> {
    let device = device.clone();
    let model = Gpt2::random(small_config(), 11, DType::F32, &device).unwrap();
    let varmap = candle_nn::VarMap::new();
    let trainable = model.to_varmap(&varmap).unwrap();
    let tokens = Tensor::new(
        &[
            [1u32, 5, 9, 63, 0, 2, 7, 7, 12],
            [3, 3, 4, 4, 5, 5, 40, 41, 42],
        ],
        &device,
    )
    .unwrap();
    let loss_of = |m: &Gpt2| -> f64 {
        let logits = m.forward_logits(&tokens).unwrap();
        Gpt2::next_token_loss(&logits, &tokens)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap() as f64
    };
    let loss = Gpt2::next_token_loss(&trainable.forward_logits(&tokens).unwrap(), &tokens).unwrap();
    let grads = loss.backward().unwrap();
    let vars: Vec<(String, candle_core::Var)> = {
        let data = varmap.data().lock().unwrap();
        let mut v: Vec<_> = data.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    assert_eq!(vars.len(), model.named_tensors().len());
    let eps = 1e-3;
    for (i, (name, var)) in vars.iter().enumerate() {
        let theta = var.as_tensor().copy().unwrap();
        let dir = randn(theta.dims(), 1.0, i as u64)
            .to_dtype(DType::F32)
            .unwrap()
            .to_device(&device)
            .unwrap();
        let grad = grads.get(var.as_tensor()).unwrap();
        let analytic = (grad * &dir)
            .unwrap()
            .sum_all()
            .unwrap()
            .to_dtype(DType::F64)
            .unwrap()
            .to_scalar::<f64>()
            .unwrap();
        let at = |s: f64| {
            var.set(&(&theta + (&dir * (s * eps)).unwrap()).unwrap())
                .unwrap();
            loss_of(&trainable)
        };
        // Central differences: the f32 loss's rounding (a few ulps of ~4, other orders on CUDA)
        // moves this quotient by up to ~1e-3; a larger step leaves the linear range along the
        // residual-stream biases (the stream is small at init and the layer norms scale it up).
        let numeric = (at(1.0) - at(-1.0)) / (2.0 * eps);
        var.set(&theta).unwrap();
        assert!(
            (numeric - analytic).abs() <= 0.03 * analytic.abs().max(numeric.abs()) + 1e-3,
            "{device:?} {name} (#{i}): d loss along a random direction {analytic} from the \
             gradient, {numeric} from finite differences"
        );
    }
    Ok(())
}
