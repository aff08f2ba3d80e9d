//! Loading a model of any family from a directory or the Hugging Face cache, or making one of a
//! named shape with random weights.
use crate::config::ConfigFile;
use crate::error::{Error, Result};
use crate::gemma2::{self, Gemma2, Gemma2Config};
use crate::llama::{self, Llama, LlamaConfig};
use crate::neox::{self, NeoX, NeoXConfig};
use crate::{Depth, Model};
use candle_core::{DType, Device};
use candle_nn::VarBuilder;
use gpt2::{Gpt2, ModelFiles};
use std::path::Path;

/// Resolves `name`: a directory, else a hub id in the offline cache (`Qwen/Qwen2.5-0.5B`, with or
/// without an `hf:` prefix, optionally `@revision`), else with the `hf-hub` feature a download.
pub fn locate(name: &str) -> Result<ModelFiles> {
    let name = name.strip_prefix("hf:").unwrap_or(name);
    Ok(gpt2::locate(name)?)
}

/// `model_type` of the `config.json` at `path`.
pub fn read_model_type(path: &Path) -> Result<String> {
    ConfigFile::read(path)?.model_type()
}

impl Model {
    /// Loads the model `name` names (see [`locate`]) in `dtype` on `device`, reading only the
    /// blocks `depth` asks for (GPT-2 always loads whole).
    pub fn load(name: &str, dtype: DType, device: &Device, depth: Depth) -> Result<Self> {
        Self::load_files(&locate(name)?, dtype, device, depth)
    }

    pub fn load_files(
        files: &ModelFiles,
        dtype: DType,
        device: &Device,
        depth: Depth,
    ) -> Result<Self> {
        let cfg = ConfigFile::read(&files.config)?;
        let model_type = cfg.model_type()?;
        if model_type == "gpt2" {
            return Ok(Model::Gpt2(Gpt2::load_files(files, dtype, device)?));
        }
        if !crate::SUPPORTED_MODEL_TYPES.contains(&model_type.as_str()) {
            return Err(Error::UnsupportedFamily {
                path: files.config.clone(),
                model_type,
            });
        }
        let model_err = |e: candle_core::Error| Error::Model {
            path: files.weights[0].clone(),
            message: e.to_string(),
        };
        // SAFETY: the files are memory-mapped read-only; they must not change while loading.
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(&files.weights, dtype, device) }
            .map_err(model_err)?;
        let built = match model_type.as_str() {
            t if llama::MODEL_TYPES.contains(&t) => {
                Llama::new(LlamaConfig::from_file(&cfg)?, vb, depth).map(Model::Llama)
            }
            t if gemma2::MODEL_TYPES.contains(&t) => {
                Gemma2::new(Gemma2Config::from_file(&cfg)?, vb, depth).map(Model::Gemma2)
            }
            t if neox::MODEL_TYPES.contains(&t) => {
                NeoX::new(NeoXConfig::from_file(&cfg)?, vb, depth).map(Model::NeoX)
            }
            _ => unreachable!("checked against SUPPORTED_MODEL_TYPES above"),
        };
        built.map_err(|e| match e {
            Error::Candle(c) => model_err(c),
            other => other,
        })
    }

    /// A named shape with random weights (`llama-3.1-8b`, `qwen2.5-7b`, ...; GPT-2's sizes are
    /// made by the `gpt2` crate), the blocks `depth` asks for.
    pub fn random(
        shape: &str,
        seed: u64,
        dtype: DType,
        device: &Device,
        depth: Depth,
    ) -> Result<Self> {
        let vb = crate::random::random_weights(seed, dtype, device)?;
        if let Some(cfg) = LlamaConfig::shape(shape) {
            return Ok(Model::Llama(Llama::new(cfg, vb, depth)?));
        }
        if let Some(cfg) = Gemma2Config::shape(shape) {
            return Ok(Model::Gemma2(Gemma2::new(cfg, vb, depth)?));
        }
        if let Some(cfg) = NeoXConfig::shape(shape) {
            return Ok(Model::NeoX(NeoX::new(cfg, vb, depth)?));
        }
        Err(Error::UnknownShape {
            name: shape.to_string(),
            known: random_shapes().iter().map(|s| s.to_string()).collect(),
        })
    }
}

/// The shapes [`Model::random`] makes.
pub fn random_shapes() -> Vec<&'static str> {
    [llama::SHAPES, gemma2::SHAPES, neox::SHAPES].concat()
}
