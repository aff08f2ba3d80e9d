//! Finding, loading, generating and saving GPT-2 weights in the Hugging Face layout.
use super::{Gpt2, Gpt2Config};
use crate::error::{Error, Result};
use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{VarBuilder, VarMap};
use rand::SeedableRng;
use rand_distr::Distribution;
use std::path::{Path, PathBuf};

/// The files of one model: its `config.json` and one or more safetensors files.
#[derive(Debug, Clone)]
pub struct ModelFiles {
    pub config: PathBuf,
    pub weights: Vec<PathBuf>,
}

impl ModelFiles {
    /// A directory with `config.json` and `model.safetensors` or `model.safetensors.index.json`.
    pub fn in_dir(dir: &Path) -> Result<Self> {
        let config = dir.join("config.json");
        if !config.is_file() {
            return Err(Error::Model {
                path: dir.to_path_buf(),
                message: "no config.json in this directory".into(),
            });
        }
        let single = dir.join("model.safetensors");
        let index = dir.join("model.safetensors.index.json");
        let weights = if single.is_file() {
            vec![single]
        } else if index.is_file() {
            sharded_weights(dir, &index)?
        } else {
            return Err(Error::Model {
                path: dir.to_path_buf(),
                message: "neither model.safetensors nor model.safetensors.index.json (only safetensors weights are read; convert pytorch_model.bin with transformers' save_pretrained(safe_serialization=True))".into(),
            });
        };
        Ok(Self { config, weights })
    }
}

fn sharded_weights(dir: &Path, index: &Path) -> Result<Vec<PathBuf>> {
    let text = std::fs::read_to_string(index).map_err(|e| Error::io(index, e))?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|source| Error::Json {
        path: index.to_path_buf(),
        source,
    })?;
    let map = json
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| Error::Model {
            path: index.to_path_buf(),
            message: "no `weight_map` object".into(),
        })?;
    let mut files: Vec<String> = map
        .values()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    files.sort();
    files.dedup();
    let paths: Vec<PathBuf> = files.iter().map(|f| dir.join(f)).collect();
    if let Some(missing) = paths.iter().find(|p| !p.is_file()) {
        return Err(Error::Model {
            path: missing.clone(),
            message: "listed in model.safetensors.index.json but missing".into(),
        });
    }
    Ok(paths)
}

/// Hugging Face hub cache roots, in the order `huggingface_hub` uses them.
pub fn hf_cache_roots() -> Vec<PathBuf> {
    let mut roots = Vec::new();
    if let Some(p) = std::env::var_os("HF_HUB_CACHE") {
        roots.push(PathBuf::from(p));
    }
    if let Some(p) = std::env::var_os("HF_HOME") {
        roots.push(PathBuf::from(p).join("hub"));
    }
    if let Some(p) = std::env::var_os("XDG_CACHE_HOME") {
        roots.push(PathBuf::from(p).join("huggingface").join("hub"));
    }
    if let Some(p) = std::env::var_os("HOME") {
        roots.push(
            PathBuf::from(p)
                .join(".cache")
                .join("huggingface")
                .join("hub"),
        );
    }
    roots.dedup();
    roots
}

/// The snapshot directory of `repo_id` at `revision` (a branch under `refs/`, or a commit hash) in
/// a hub cache root: `models--{org}--{name}/refs/{revision}` names `snapshots/{hash}`.
pub fn hf_snapshot_dir(root: &Path, repo_id: &str, revision: &str) -> Option<PathBuf> {
    let repo = root.join(format!("models--{}", repo_id.replace('/', "--")));
    let hash = std::fs::read_to_string(repo.join("refs").join(revision))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| revision.to_string());
    let dir = repo.join("snapshots").join(hash);
    dir.is_dir().then_some(dir)
}

/// Resolves `name`: a directory path, else a hub id (`gpt2`, `openai-community/gpt2-xl`,
/// optionally `id@revision`) in the offline cache, else (with the `hf-hub` feature) a download.
pub fn locate(name: &str) -> Result<ModelFiles> {
    let path = Path::new(name);
    if path.is_dir() {
        return ModelFiles::in_dir(path);
    }
    let (repo_id, revision) = name.split_once('@').unwrap_or((name, "main"));
    let mut looked = vec![format!("directory {}", path.display())];
    let candidates: Vec<String> = if repo_id.contains('/') {
        vec![repo_id.to_string()]
    } else {
        vec![repo_id.to_string(), format!("openai-community/{repo_id}")]
    };
    for root in hf_cache_roots() {
        for id in &candidates {
            match hf_snapshot_dir(&root, id, revision) {
                Some(dir) => return ModelFiles::in_dir(&dir),
                None => looked.push(format!(
                    "{}/models--{}/refs/{revision}",
                    root.display(),
                    id.replace('/', "--")
                )),
            }
        }
    }
    #[cfg(feature = "hf-hub")]
    {
        return download(repo_id, revision);
    }
    #[cfg(not(feature = "hf-hub"))]
    Err(Error::ModelNotFound {
        name: name.to_string(),
        looked,
        hint: "Provide a directory with config.json and model.safetensors, place the model in the \
               Hugging Face cache (HF_HOME or HF_HUB_CACHE; e.g. `huggingface-cli download gpt2` on a \
               machine with network, then copy the cache), or build with `--features hf-hub` to \
               download it."
            .into(),
    })
}

#[cfg(feature = "hf-hub")]
fn download(repo_id: &str, revision: &str) -> Result<ModelFiles> {
    let err = |e: hf_hub::api::sync::ApiError| Error::Model {
        path: PathBuf::from(repo_id),
        message: format!("download failed: {e}"),
    };
    let api = hf_hub::api::sync::Api::new().map_err(err)?;
    let repo = api.repo(hf_hub::Repo::with_revision(
        repo_id.to_string(),
        hf_hub::RepoType::Model,
        revision.to_string(),
    ));
    let config = repo.get("config.json").map_err(err)?;
    let weights = vec![repo.get("model.safetensors").map_err(err)?];
    Ok(ModelFiles { config, weights })
}

/// Every weight's Hugging Face name and shape, in [`Gpt2::named_tensors`] order.
pub fn hf_shapes(cfg: &Gpt2Config) -> Vec<(String, Vec<usize>)> {
    let d = cfg.n_embd;
    let mut out = vec![
        ("wte.weight".to_string(), vec![cfg.vocab_size, d]),
        ("wpe.weight".to_string(), vec![cfg.n_positions, d]),
    ];
    for i in 0..cfg.n_layer {
        for (name, d_in, d_out) in [
            ("ln_1", 0, d),
            ("attn.c_attn", d, 3 * d),
            ("attn.c_proj", d, d),
            ("ln_2", 0, d),
            ("mlp.c_fc", d, 4 * d),
            ("mlp.c_proj", 4 * d, d),
        ] {
            let weight = if d_in == 0 {
                vec![d_out]
            } else {
                vec![d_in, d_out]
            };
            out.push((format!("h.{i}.{name}.weight"), weight));
            out.push((format!("h.{i}.{name}.bias"), vec![d_out]));
        }
    }
    out.push(("ln_f.weight".to_string(), vec![d]));
    out.push(("ln_f.bias".to_string(), vec![d]));
    out
}

impl Gpt2 {
    /// Loads a model by directory or hub id (see [`locate`]) in `dtype` on `device`.
    pub fn load(name: &str, dtype: DType, device: &Device) -> Result<Self> {
        Self::load_files(&locate(name)?, dtype, device)
    }

    pub fn load_files(files: &ModelFiles, dtype: DType, device: &Device) -> Result<Self> {
        let cfg = Gpt2Config::from_file(&files.config)?;
        let model_err = |e: candle_core::Error| Error::Model {
            path: files.weights[0].clone(),
            message: e.to_string(),
        };
        // SAFETY: the files are memory-mapped read-only; they must not be modified while loading.
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(&files.weights, dtype, device) }
            .map_err(model_err)?;
        // Checkpoints saved from GPT2LMHeadModel prefix every name with `transformer.`.
        let vb = if vb.contains_tensor("transformer.wte.weight") {
            vb.pp("transformer")
        } else {
            vb
        };
        Self::new(cfg, vb).map_err(|e| match e {
            Error::Candle(c) => model_err(c),
            other => other,
        })
    }

    /// Random weights with GPT-2's initialisation. On the CPU they depend only on `seed`; on
    /// other devices they come from the device's generator, seeded with `seed`.
    pub fn random(cfg: Gpt2Config, seed: u64, dtype: DType, device: &Device) -> Result<Self> {
        cfg.validate()?;
        let shapes = hf_shapes(&cfg);
        if !device.is_cpu() {
            device.set_seed(seed)?;
        }
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let proj_std = 0.02 / (2.0 * cfg.n_layer as f64).sqrt();
        let mut tensors = std::collections::HashMap::new();
        for (name, dims) in shapes {
            let std = if name.ends_with("c_proj.weight") {
                proj_std
            } else if name == "wpe.weight" {
                0.01
            } else {
                0.02
            };
            let t = if name.contains("ln_") && name.ends_with(".weight") {
                Tensor::ones(dims, dtype, device)?
            } else if name.ends_with(".bias") {
                Tensor::zeros(dims, dtype, device)?
            } else if device.is_cpu() {
                let normal = rand_distr::Normal::new(0.0f32, std as f32)
                    .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
                let n: usize = dims.iter().product();
                let v: Vec<f32> = (0..n).map(|_| normal.sample(&mut rng)).collect();
                Tensor::from_vec(v, dims, device)?.to_dtype(dtype)?
            } else {
                Tensor::randn(0f32, std as f32, dims, device)?.to_dtype(dtype)?
            };
            tensors.insert(name, t);
        }
        Self::new(cfg, VarBuilder::from_tensors(tensors, dtype, device))
    }

    /// A trainable copy: every weight becomes a variable registered in `varmap` under its Hugging
    /// Face name, so `varmap.all_vars()` feeds an optimizer and `save_hf` writes the trained model.
    pub fn to_varmap(&self, varmap: &VarMap) -> Result<Self> {
        {
            let mut data = varmap
                .data()
                .lock()
                .map_err(|_| candle_core::Error::Msg("VarMap lock poisoned".into()))?;
            for (name, t) in self.named_tensors() {
                data.insert(name, Var::from_tensor(&t)?);
            }
        }
        Self::new(
            self.config().clone(),
            VarBuilder::from_varmap(varmap, self.dtype(), self.device()),
        )
    }

    /// The same weights in another dtype or on another device.
    pub fn converted(&self, dtype: DType, device: &Device) -> Result<Gpt2> {
        let tensors = self
            .named_tensors()
            .into_iter()
            .map(|(n, t)| Ok((n, t.to_dtype(dtype)?.to_device(device)?)))
            .collect::<Result<std::collections::HashMap<_, _>>>()?;
        Gpt2::new(
            self.config().clone(),
            VarBuilder::from_tensors(tensors, dtype, device),
        )
    }

    /// Writes `config.json` and `model.safetensors` with Hugging Face names into `dir`, atomically.
    pub fn save_hf(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let tensors: std::collections::HashMap<String, Tensor> =
            self.named_tensors().into_iter().collect();
        let weights = dir.join("model.safetensors");
        runtime::fs::write_atomic_via(&weights, |tmp| {
            candle_core::safetensors::save(&tensors, tmp)
        })?;
        let config = serde_json::to_vec_pretty(&self.config().to_hf_json()).map_err(|source| {
            Error::Json {
                path: dir.join("config.json"),
                source,
            }
        })?;
        Ok(runtime::fs::write_atomic(
            &dir.join("config.json"),
            &config,
        )?)
    }
}
