//! Every hook point and the CE loss of tiny random models of each family against what Hugging Face
//! transformers computes for them (fixtures written by tools/hf_fixtures.py, f32 on the CPU;
//! versions in tests/fixtures/VERSIONS.json). The same bodies run on CUDA in bf16 with the cuda
//! feature.
use candle_core::{DType, Device, Tensor};
use models::{Depth, HookPoint, Model};
use std::collections::HashMap;
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// ‖got − want‖∞ / ‖want‖∞.
fn rel_err(got: &Tensor, want: &Tensor) -> anyhow::Result<f32> {
    let got = got.to_dtype(DType::F32)?.to_device(&Device::Cpu)?;
    let diff = (got - want)?
        .abs()?
        .flatten_all()?
        .max(0)?
        .to_scalar::<f32>()?;
    let scale = want.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()?;
    Ok(diff / scale)
}

struct Expected {
    tensors: HashMap<String, Tensor>,
    tokens: Tensor,
    /// Hook names in the file, sorted.
    hooks: Vec<String>,
}

fn expected(name: &str, device: &Device) -> anyhow::Result<Expected> {
    let tensors =
        candle_core::safetensors::load(fixture(name).join("expected.safetensors"), &Device::Cpu)?;
    let tokens = tensors["tokens"].to_dtype(DType::U32)?.to_device(device)?;
    let mut hooks: Vec<String> = tensors
        .keys()
        .filter(|k| k.contains("hook"))
        .cloned()
        .collect();
    hooks.sort();
    Ok(Expected {
        tensors,
        tokens,
        hooks,
    })
}

/// f32 on the CPU at 1e-5; bf16 on CUDA, where each rounding of the stream costs ~0.4%.
fn precision(device: &Device) -> (DType, f32) {
    if device.is_cpu() {
        (DType::F32, 1e-5)
    } else {
        (DType::BF16, 4e-2)
    }
}

fn matches_transformers(name: &str, device: &Device) -> anyhow::Result<()> {
    let (dtype, tol) = precision(device);
    let want = expected(name, device)?;
    let model = Model::load(fixture(name).to_str().unwrap(), dtype, device, Depth::Full)?;
    let points: Vec<HookPoint> = want
        .hooks
        .iter()
        .map(|h| h.parse())
        .collect::<Result<_, _>>()?;
    assert_eq!(
        points.len(),
        5 * model.n_layer() + 1,
        "{name}: hooks in the fixture"
    );
    let got = model.forward_hooks(&want.tokens, &points)?;
    for (hook, g) in want.hooks.iter().zip(&got) {
        let err = rel_err(g, &want.tensors[hook])?;
        assert!(
            err <= tol,
            "{name} {hook}: relative error {err:e} > {tol:e}"
        );
    }
    let logits = model.forward_logits(&want.tokens)?;
    let err = rel_err(&logits, &want.tensors["logits"])?;
    assert!(
        err <= tol,
        "{name} logits: relative error {err:e} > {tol:e}"
    );
    let loss = Model::next_token_loss(&logits, &want.tokens)?;
    let err = rel_err(&loss.reshape(1)?, &want.tensors["loss"])?;
    assert!(
        err <= tol,
        "{name} CE loss: relative error {err:e} > {tol:e}"
    );
    Ok(())
}

/// Loaded up to one block, the model reads only what that block needs and gives the same values.
fn truncated_load_matches(name: &str, device: &Device) -> anyhow::Result<()> {
    let (dtype, tol) = precision(device);
    let want = expected(name, device)?;
    let hooks = [HookPoint::ResidPost(0), HookPoint::ResidPre(1)];
    let depth = Depth::for_hooks(&hooks, false);
    assert_eq!(depth, Depth::Blocks(1));
    let model = Model::load(fixture(name).to_str().unwrap(), dtype, device, depth)?;
    let got = model.forward_hooks(&want.tokens, &hooks)?;
    for (h, g) in hooks.iter().zip(&got) {
        let err = rel_err(g, &want.tensors[&h.to_string()])?;
        assert!(err <= tol, "{name} {h}: relative error {err:e}");
    }
    let err = model.forward_logits(&want.tokens).unwrap_err().to_string();
    assert!(err.contains("Depth::Full"), "{err}");
    Ok(())
}

mod exact {
    use super::*;
    pub fn llama(d: &Device) -> anyhow::Result<()> {
        matches_transformers("llama", d)
    }
    pub fn qwen2(d: &Device) -> anyhow::Result<()> {
        matches_transformers("qwen2", d)
    }
    pub fn qwen3(d: &Device) -> anyhow::Result<()> {
        matches_transformers("qwen3", d)
    }
    pub fn mistral(d: &Device) -> anyhow::Result<()> {
        matches_transformers("mistral", d)
    }
    pub fn gemma2(d: &Device) -> anyhow::Result<()> {
        matches_transformers("gemma2", d)
    }
    pub fn pythia(d: &Device) -> anyhow::Result<()> {
        matches_transformers("pythia", d)
    }
    pub fn llama_truncated(d: &Device) -> anyhow::Result<()> {
        truncated_load_matches("llama", d)
    }
}

runtime::test_device!(exact::{llama, qwen2, qwen3, mistral, gemma2, pythia, llama_truncated});

#[test]
fn unsupported_model_type_names_the_supported_ones() {
    let dir = std::env::temp_dir().join(format!("models-unsupported-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), r#"{"model_type": "bert"}"#).unwrap();
    std::fs::write(dir.join("model.safetensors"), b"").unwrap();
    let err = Model::load(dir.to_str().unwrap(), DType::F32, &Device::Cpu, Depth::Full)
        .unwrap_err()
        .to_string();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(err.contains("`bert` is not supported"), "{err}");
    assert!(err.contains("llama, qwen2, qwen3, mistral"), "{err}");
}

#[test]
fn unknown_random_shape_names_the_known_ones() {
    let err = Model::random("llama-9", 0, DType::F32, &Device::Cpu, Depth::Blocks(1))
        .unwrap_err()
        .to_string();
    for known in models::random_shapes() {
        assert!(err.contains(known), "{err}");
    }
    assert_eq!(models::random_shapes().len(), 5);
}
