//! Reading a Hugging Face `config.json`: typed fields with errors naming the file and key, and the
//! rotary settings in both of transformers' spellings (`rope_theta` + `rope_scaling` up to 4.x,
//! `rope_parameters` from 5.0).
use crate::error::{Error, Result};
use crate::layers::RopeScaling;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A parsed `config.json` and where it came from.
pub struct ConfigFile {
    pub path: PathBuf,
    pub json: Value,
}

impl ConfigFile {
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let json = serde_json::from_str(&text).map_err(|source| Error::Json {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Self {
            path: path.to_path_buf(),
            json,
        })
    }

    /// `model_type`, which names the family.
    pub fn model_type(&self) -> Result<String> {
        self.str("model_type")
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.json.get(key).filter(|v| !v.is_null())
    }

    fn bad(&self, key: &str, message: impl Into<String>) -> Error {
        Error::config(&self.path, key, message)
    }

    pub fn str(&self, key: &str) -> Result<String> {
        self.get(key)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| self.bad(key, "missing or not a string"))
    }

    pub fn str_or(&self, key: &str, default: &str) -> Result<String> {
        match self.get(key) {
            None => Ok(default.to_string()),
            Some(_) => self.str(key),
        }
    }

    pub fn usize(&self, key: &str) -> Result<usize> {
        self.opt_usize(key)?
            .ok_or_else(|| self.bad(key, "missing; expected a positive integer"))
    }

    pub fn opt_usize(&self, key: &str) -> Result<Option<usize>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .filter(|n| *n > 0)
                .map(|n| Some(n as usize))
                .ok_or_else(|| self.bad(key, format!("expected a positive integer, got {v}"))),
        }
    }

    pub fn f64_or(&self, key: &str, default: f64) -> Result<f64> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_f64()
                .ok_or_else(|| self.bad(key, format!("expected a number, got {v}"))),
        }
    }

    pub fn opt_f64(&self, key: &str) -> Result<Option<f64>> {
        match self.get(key) {
            None => Ok(None),
            Some(_) => self.f64_or(key, 0.0).map(Some),
        }
    }

    pub fn bool_or(&self, key: &str, default: bool) -> Result<bool> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| self.bad(key, format!("expected true or false, got {v}"))),
        }
    }

    /// `layer_types` ("full_attention" / "sliding_attention" per layer) when the file lists them.
    pub fn layer_types(&self, n_layer: usize) -> Result<Option<Vec<bool>>> {
        let Some(v) = self.get("layer_types") else {
            return Ok(None);
        };
        let list = v.as_array().filter(|a| a.len() == n_layer).ok_or_else(|| {
            self.bad(
                "layer_types",
                format!("expected a list of {n_layer} entries"),
            )
        })?;
        list.iter()
            .map(|t| match t.as_str() {
                Some("sliding_attention") => Ok(true),
                Some("full_attention") => Ok(false),
                _ => Err(self.bad(
                    "layer_types",
                    format!("`{t}`: expected \"full_attention\" or \"sliding_attention\""),
                )),
            })
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    /// A number in `rope_parameters` (transformers 5), if there.
    pub fn rope_field(&self, name: &str) -> Option<f64> {
        self.get("rope_parameters")
            .and_then(|p| p.get(name))
            .and_then(Value::as_f64)
    }

    /// The rotary base and scaling, from `rope_parameters` (transformers 5) or `rope_theta` and
    /// `rope_scaling` (4.x); `theta_key` is the 4.x key of the base (`rotary_emb_base` in GPT-NeoX).
    pub fn rope(&self, theta_key: &str, default_theta: f64) -> Result<(f64, RopeScaling)> {
        let (params, key) = match self.get("rope_parameters") {
            Some(p) => (Some(p), "rope_parameters"),
            None => (self.get("rope_scaling"), "rope_scaling"),
        };
        let theta = match params
            .and_then(|p| p.get("rope_theta"))
            .and_then(Value::as_f64)
        {
            Some(t) => t,
            None => match self.opt_f64("rope_theta")? {
                Some(t) => t,
                None => self.f64_or(theta_key, default_theta)?,
            },
        };
        let Some(p) = params else {
            return Ok((theta, RopeScaling::None));
        };
        let field = |name: &str| -> Result<f64> {
            p.get(name)
                .and_then(Value::as_f64)
                .ok_or_else(|| self.bad(&format!("{key}.{name}"), "missing or not a number"))
        };
        let kind = p
            .get("rope_type")
            .or_else(|| p.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("default");
        let scaling = match kind {
            "default" => RopeScaling::None,
            "linear" => RopeScaling::Linear {
                factor: field("factor")?,
            },
            "llama3" => RopeScaling::Llama3 {
                factor: field("factor")?,
                low_freq_factor: field("low_freq_factor")?,
                high_freq_factor: field("high_freq_factor")?,
                original_max_position_embeddings: field("original_max_position_embeddings")?,
            },
            other => {
                return Err(self.bad(
                    &format!("{key}.rope_type"),
                    format!("`{other}` is not supported; supported: default, linear, llama3"),
                ))
            }
        };
        Ok((theta, scaling))
    }
}
