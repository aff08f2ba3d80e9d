//! Checkpoints. A checkpoint directory holds
//! - `cfg.json` + `sae_weights.safetensors`: the SAE as SAELens loads it (input scaling folded in, the
//!   batch selection exported as a JumpReLU threshold; see docs/saelens.md),
//! - `training_state.safetensors`: raw parameters in the training layout (W_enc as [n, d_in] rows), Adam
//!   moments and the dead-latent counters. With one hook point the SAELens file holds the weight
//!   matrices bit for bit (W_enc transposed), so they are not stored twice: a resume reads them there,
//!   and the checkpoint is a quarter smaller,
//! - `trainer_state.json`: step, tokens consumed (the data position), threshold, input scales, config.
//!
//! The training loop (harness::train_loop) writes the folder under a temporary name and renames it into place.
use crate::config::{Arch, Config, DataConfig};
use crate::model::{Sae, Shape};
use crate::{trainer::Trainer, Error, Result};
use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::{collections::HashMap, path::Path};

/// Writes `bytes` to `path` atomically (`runtime::fs`).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    Ok(runtime::fs::write_atomic(path, bytes)?)
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TrainerState {
    pub step: u64,
    pub tokens: u64,
    pub threshold: f64,
    pub scales: Vec<f64>,
    pub adam_t: u64,
    pub d_model: usize,
    pub layers: usize,
    pub config: Config,
}

/// The SAE in the original input space: (W_enc, b_enc, W_dec, b_dec, threshold per latent).
pub struct Exported {
    pub w_enc: Tensor,
    pub b_enc: Tensor,
    pub w_dec: Tensor,
    pub b_dec: Tensor,
    pub threshold: Tensor,
}

/// Folds the input scales into the weights. One layer: the biases and the threshold are divided by the
/// scale (W stays unit-norm). Several layers: layer l of W_enc is multiplied by s_l, and layer l of W_dec
/// and b_dec divided by it (pre-activations, and so the threshold, are unchanged).
pub fn fold_scales(sae: &Sae, threshold: f64, scales: &[f64]) -> Result<Exported> {
    let Shape {
        n, d_model, layers, ..
    } = sae.shape;
    let dev = sae.device();
    let w_enc = sae.w_enc_saelens()?;
    let b_enc = sae.b_enc.as_tensor().clone();
    let w_dec = sae.w_dec.as_tensor().clone();
    let b_dec = sae.b_dec.as_tensor().clone();
    let theta = threshold.max(0.0);
    if layers == 1 {
        let s = scales[0];
        return Ok(Exported {
            w_enc,
            b_enc: (b_enc / s)?,
            w_dec,
            b_dec: (b_dec / s)?,
            threshold: Tensor::full((theta / s) as f32, n, dev)?,
        });
    }
    let per_feature: Vec<f32> = scales
        .iter()
        .flat_map(|s| std::iter::repeat_n(*s as f32, d_model))
        .collect();
    let s = Tensor::from_vec(per_feature, layers * d_model, dev)?;
    Ok(Exported {
        w_enc: w_enc.broadcast_mul(&s.unsqueeze(1)?)?,
        b_enc,
        w_dec: w_dec.broadcast_div(&s.unsqueeze(0)?)?,
        b_dec: (b_dec / &s)?,
        threshold: Tensor::full(theta as f32, n, dev)?,
    })
}

/// SAELens' hook name for the configured hook point.
fn hook_name(cfg: &Config) -> String {
    match &cfg.data {
        DataConfig::Model { hook, layers, .. } => {
            let l = layers.first().copied().unwrap_or(0);
            hook.at(l).to_string()
        }
        _ => "unknown".into(),
    }
}

/// cfg.json in SAELens' layout (v6 keys, plus the pre-v6 top-level keys older loaders read).
pub fn saelens_cfg(cfg: &Config, shape: &Shape) -> serde_json::Value {
    let (model_name, context, dataset) = match &cfg.data {
        DataConfig::Model {
            model,
            context,
            corpus,
            ..
        } => (model.clone(), *context, corpus.clone()),
        DataConfig::Shards { dir, .. } => ("unknown".into(), 0, dir.display().to_string()),
        DataConfig::Synthetic { .. } => ("synthetic".into(), 0, "synthetic".into()),
    };
    let hook = hook_name(cfg);
    let layer = match &cfg.data {
        DataConfig::Model { layers, .. } => layers.first().copied().unwrap_or(0),
        _ => 0,
    };
    // Every hook point, in the order of the weights' layer axis (a crosscoder has several).
    let (hook_names, hook_layers): (Vec<String>, Vec<usize>) = match &cfg.data {
        DataConfig::Model { hook, layers, .. } => layers
            .iter()
            .map(|l| (format!("blocks.{l}.hook_{hook}"), *l))
            .unzip(),
        _ => (vec![hook.clone()], vec![layer]),
    };
    let architecture = if shape.arch == Arch::Crosscoder {
        "crosscoder_jumprelu"
    } else {
        "jumprelu"
    };
    json!({
        "architecture": architecture,
        "d_in": shape.d_model,
        "d_sae": shape.n,
        "dtype": "float32",
        "device": "cpu",
        "apply_b_dec_to_input": true,
        "normalize_activations": "none",
        "reshape_activations": "none",
        "metadata": {
            "model_name": model_name,
            "hook_name": hook,
            "hook_head_index": null,
            "prepend_bos": true,
            "context_size": context,
            "dataset_path": dataset,
            "hook_names": hook_names,
        },
        "model_name": model_name,
        "hook_name": hook,
        "hook_layer": layer,
        "hook_names": hook_names,
        "hook_layers": hook_layers,
        "hook_head_index": null,
        "context_size": context,
        "dataset_path": dataset,
        "prepend_bos": true,
        "activation_fn_str": "relu",
        "finetuning_scaling_factor": false,
        "sparsetrain": {
            "trained_as": match shape.arch {
                Arch::Batchtopk => "batchtopk",
                Arch::Matryoshka => "matryoshka_batchtopk",
                Arch::Crosscoder => "batchtopk_crosscoder",
            },
            "k": shape.k,
            "layers": shape.layers,
            "group_sizes": shape.groups,
        },
    })
}

/// Writes cfg.json and sae_weights.safetensors (the SAELens pair) into `dir`.
pub fn write_saelens(
    dir: &Path,
    cfg: &Config,
    sae: &Sae,
    threshold: f64,
    scales: &[f64],
) -> Result<()> {
    let tensors = on_host(&saelens_tensors(sae, threshold, scales)?)?;
    save_tensors(&dir.join(SAELENS_TENSORS), &tensors)?;
    write_saelens_cfg(dir, cfg, sae)
}

/// The SAELens weights, copies on the SAE's device: input scaling folded in, W_enc [d_in, n], crosscoder
/// layers split.
fn saelens_tensors(sae: &Sae, threshold: f64, scales: &[f64]) -> Result<HashMap<String, Tensor>> {
    let e = fold_scales(sae, threshold, scales)?;
    let Shape {
        n, d_model, layers, ..
    } = sae.shape;
    let (w_enc, w_dec, b_dec) = if layers > 1 {
        (
            e.w_enc.reshape((layers, d_model, n))?,
            e.w_dec.reshape((n, layers, d_model))?,
            e.b_dec.reshape((layers, d_model))?,
        )
    } else {
        (e.w_enc, e.w_dec, e.b_dec)
    };
    [
        ("W_enc", w_enc),
        ("b_enc", e.b_enc),
        ("W_dec", w_dec),
        ("b_dec", b_dec),
        ("threshold", e.threshold),
    ]
    .into_iter()
    .map(|(k, v)| Ok((k.to_string(), snapshot(&v)?)))
    .collect()
}

fn write_saelens_cfg(dir: &Path, cfg: &Config, sae: &Sae) -> Result<()> {
    write_atomic(
        &dir.join(SAELENS_CFG),
        saelens_cfg_text(cfg, sae).as_bytes(),
    )
}

fn saelens_cfg_text(cfg: &Config, sae: &Sae) -> String {
    serde_json::to_string_pretty(&saelens_cfg(cfg, &sae.shape)).expect("JSON value")
}

/// The SAELens pair of the checkpoint `ckpt` in `dir` as hard links (the same bytes: a finished run's
/// export is its final checkpoint's SAE), each linked under a temporary name and renamed into place.
pub fn link_saelens(ckpt: &Path, dir: &Path) -> Result<()> {
    for name in [SAELENS_TENSORS, SAELENS_CFG] {
        let (from, to) = (ckpt.join(name), dir.join(name));
        let tmp = runtime::fs::temp_path(&to);
        std::fs::hard_link(&from, &tmp).map_err(|e| Error::io(&tmp, e))?;
        std::fs::rename(&tmp, &to).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            Error::io(&to, e)
        })?;
    }
    Ok(())
}

const SAELENS_TENSORS: &str = "sae_weights.safetensors";
const SAELENS_CFG: &str = "cfg.json";

fn save_tensors(path: &Path, tensors: &HashMap<String, Tensor>) -> Result<()> {
    Ok(runtime::fs::write_atomic_via(path, |tmp| {
        candle_core::safetensors::save(tensors, tmp)
    })?)
}

/// Writes the SAELens pair, `training_state.safetensors` and `trainer_state.json` into `dir` (an empty
/// folder that the training loop renames into place).
pub fn save_state(dir: &Path, trainer: &Trainer) -> Result<()> {
    StateImage::of(trainer)?.write(dir)
}

/// Everything a checkpoint holds, copied on the SAE's device (milliseconds): moved to the host and written
/// later, on another thread, while the trainer goes on. Until written it takes as much device memory as
/// the checkpoint's two tensor files, and as much host memory while it is written.
pub struct StateImage {
    saelens: HashMap<String, Tensor>,
    state: HashMap<String, Tensor>,
    saelens_cfg: String,
    trainer_state: String,
}

impl StateImage {
    pub fn of(trainer: &Trainer) -> Result<StateImage> {
        let saelens = saelens_tensors(&trainer.sae, trainer.threshold, &trainer.scales)?;
        let mut state: HashMap<String, Tensor> = HashMap::new();
        let in_saelens = weights_in_saelens(&trainer.sae.shape);
        for (i, (name, var)) in PARAM_NAMES.iter().zip(trainer.sae.vars()).enumerate() {
            if !(in_saelens && MATRICES.contains(name)) {
                state.insert(name.to_string(), snapshot(var.as_tensor())?);
            }
            state.insert(format!("adam_m.{name}"), snapshot(&trainer.adam.m[i])?);
            state.insert(format!("adam_v.{name}"), snapshot(&trainer.adam.v[i])?);
        }
        state.insert("since_fired".into(), snapshot(&trainer.dead.since_fired)?);
        let progress = TrainerState {
            step: trainer.step,
            tokens: trainer.tokens,
            threshold: trainer.threshold,
            scales: trainer.scales.clone(),
            adam_t: trainer.adam.t,
            d_model: trainer.sae.shape.d_model,
            layers: trainer.sae.shape.layers,
            config: trainer.cfg.clone(),
        };
        Ok(StateImage {
            saelens,
            state,
            saelens_cfg: saelens_cfg_text(&trainer.cfg, &trainer.sae),
            trainer_state: serde_json::to_string_pretty(&progress).expect("serializable state"),
        })
    }

    /// Writes the checkpoint's files into `dir`.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let (saelens, state) = (on_host(&self.saelens)?, on_host(&self.state)?);
        // The two tensor files at once: each is mostly the disk's time.
        std::thread::scope(|s| {
            let weights = s.spawn(|| save_tensors(&dir.join(SAELENS_TENSORS), &saelens));
            let state = save_tensors(&dir.join(STATE_TENSORS), &state);
            let weights = weights.join().unwrap_or_else(|_| {
                Err(Error::io(
                    dir.join(SAELENS_TENSORS),
                    std::io::Error::other("the writer thread panicked"),
                ))
            });
            weights.and(state)
        })?;
        write_atomic(&dir.join(SAELENS_CFG), self.saelens_cfg.as_bytes())?;
        write_atomic(&dir.join(STATE_JSON), self.trainer_state.as_bytes())
    }
}

/// A copy of `t` in memory of its own, on `t`'s device: a tensor shares its storage with the parameter it
/// came from, which the optimizer updates in place while the image is written. On CUDA the copy is a
/// device-to-device one (milliseconds); the writer moves it to the host later.
fn snapshot(t: &Tensor) -> Result<Tensor> {
    // A strided tensor (W_enc transposed) is copied by making it contiguous.
    Ok(if t.is_contiguous() {
        t.copy()?
    } else {
        t.contiguous()?
    })
}

/// The image's tensors in host memory: device copies go through a stream of their own, so the training
/// step on the compute stream is not held up by the transfer.
fn on_host(tensors: &HashMap<String, Tensor>) -> Result<HashMap<String, Tensor>> {
    #[cfg(feature = "cuda")]
    if let Some(Device::Cuda(dev)) = tensors.values().map(Tensor::device).find(|d| d.is_cuda()) {
        let side = runtime::to_host::SideStream::new(dev)?;
        return tensors
            .iter()
            .map(|(k, v)| Ok((k.clone(), side.to_host(v)?)))
            .collect();
    }
    tensors
        .iter()
        .map(|(k, v)| Ok((k.clone(), v.to_device(&Device::Cpu)?)))
        .collect()
}

const PARAM_NAMES: [&str; 4] = ["W_enc", "b_enc", "W_dec", "b_dec"];
/// The parameters a one-hook-point checkpoint keeps only in the SAELens file.
const MATRICES: [&str; 2] = ["W_enc", "W_dec"];

/// With one hook point, no input scale touches the weight matrices (see [`fold_scales`]): the SAELens
/// file holds them exactly.
fn weights_in_saelens(shape: &Shape) -> bool {
    shape.layers == 1
}
const STATE_TENSORS: &str = "training_state.safetensors";
const STATE_JSON: &str = "trainer_state.json";

/// Restores a trainer from a checkpoint directory; `cfg` must describe the same model and data.
pub fn load_state(dir: &Path, cfg: Config, device: &Device) -> Result<Trainer> {
    let bad = |msg: String| Error::Checkpoint {
        path: dir.to_path_buf(),
        msg,
    };
    let ppath = dir.join(STATE_JSON);
    let text = std::fs::read_to_string(&ppath).map_err(|e| Error::io(&ppath, e))?;
    let p: TrainerState =
        serde_json::from_str(&text).map_err(|e| bad(format!("{STATE_JSON}: {e}")))?;
    if p.config.sae != cfg.sae || p.config.data != cfg.data || p.config.seed != cfg.seed {
        return Err(bad(
            "was trained with a different [sae], [data] or seed; use another --out".into(),
        ));
    }
    let mut state = candle_core::safetensors::load(dir.join(STATE_TENSORS), device)?;
    if !state.contains_key("W_enc") && p.layers == 1 {
        // A checkpoint that keeps the weight matrices only in its SAELens file.
        let path = dir.join(SAELENS_TENSORS);
        if !path.is_file() {
            return Err(bad(format!(
                "{SAELENS_TENSORS} is missing, and this checkpoint keeps its weight matrices there"
            )));
        }
        let mut saelens = candle_core::safetensors::load(&path, device)?;
        for name in MATRICES {
            let t = saelens
                .remove(name)
                .ok_or_else(|| bad(format!("{SAELENS_TENSORS} lacks `{name}`")))?;
            let t = if name == "W_enc" { t.t()? } else { t };
            state.insert(name.to_string(), t);
        }
    }
    let get = |name: &str| {
        state
            .get(name)
            .cloned()
            .ok_or_else(|| bad(format!("{STATE_TENSORS} lacks `{name}`")))
    };
    let shape = Shape {
        arch: cfg.sae.arch,
        d_model: p.d_model,
        layers: p.layers,
        n: cfg.sae.latents,
        k: cfg.sae.k,
        groups: cfg.sae.group_sizes.clone(),
    };
    let [w_enc, b_enc, w_dec, b_dec] = PARAM_NAMES.map(get);
    let sae = Sae::from_rows(shape, [&w_enc?, &b_enc?, &w_dec?, &b_dec?], cfg.sae.decode)?;
    let mut trainer = Trainer::with_sae(cfg, sae, p.scales)?;
    // The moments take the dtype `train.moments` asks for, whatever the checkpoint stored.
    let moments = trainer.cfg.train.moments.dtype();
    for (i, name) in PARAM_NAMES.iter().enumerate() {
        trainer.adam.m[i] = get(&format!("adam_m.{name}"))?.to_dtype(moments)?;
        trainer.adam.v[i] = get(&format!("adam_v.{name}"))?.to_dtype(moments)?;
    }
    trainer.adam.t = p.adam_t;
    trainer.dead.since_fired = get("since_fired")?;
    trainer.threshold = p.threshold;
    trainer.step = p.step;
    trainer.tokens = p.tokens;
    Ok(trainer)
}

/// Loads the SAELens pair written by [`write_saelens`]: (cfg.json, tensors by name).
pub fn read_saelens(dir: &Path) -> Result<(serde_json::Value, HashMap<String, Tensor>)> {
    let cpath = dir.join("cfg.json");
    let text = std::fs::read_to_string(&cpath).map_err(|e| Error::io(&cpath, e))?;
    let cfg = serde_json::from_str(&text).map_err(|e| Error::Checkpoint {
        path: cpath.clone(),
        msg: e.to_string(),
    })?;
    Ok((
        cfg,
        candle_core::safetensors::load(dir.join("sae_weights.safetensors"), &Device::Cpu)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crosscoder_cfg_records_every_hook_point() {
        let cfg = Config::from_toml(
            "name = \"cc\"\n[data]\nsource = \"model\"\nmodel = \"tiny\"\nlayers = [1, 3]\n\
             [sae]\narch = \"crosscoder\"\nlatents = 64\nk = 4\n\
             [train]\nbatch_size = 16\nsteps = 1\n",
        )
        .unwrap();
        let shape = Shape {
            arch: Arch::Crosscoder,
            d_model: 128,
            layers: 2,
            n: 64,
            k: 4,
            groups: Vec::new(),
        };
        let j = saelens_cfg(&cfg, &shape);
        let names = serde_json::json!(["blocks.1.hook_resid_post", "blocks.3.hook_resid_post"]);
        assert_eq!(j["hook_names"], names);
        assert_eq!(j["metadata"]["hook_names"], names);
        assert_eq!(j["hook_layers"], serde_json::json!([1, 3]));
        assert_eq!(j["hook_name"], "blocks.1.hook_resid_post");
    }
}
