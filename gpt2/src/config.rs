//! GPT-2 hyperparameters, read from and written to Hugging Face `config.json`.
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The fields of a Hugging Face GPT-2 `config.json` that the forward pass needs; other fields are ignored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gpt2Config {
    pub vocab_size: usize,
    pub n_positions: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
    #[serde(default = "default_eps")]
    pub layer_norm_epsilon: f64,
}

fn default_eps() -> f64 {
    1e-5
}

impl Gpt2Config {
    fn sized(n_embd: usize, n_layer: usize, n_head: usize) -> Self {
        Self {
            vocab_size: 50257,
            n_positions: 1024,
            n_embd,
            n_layer,
            n_head,
            layer_norm_epsilon: 1e-5,
        }
    }

    /// gpt2 (124M).
    pub fn gpt2() -> Self {
        Self::sized(768, 12, 12)
    }

    /// gpt2-medium (355M).
    pub fn medium() -> Self {
        Self::sized(1024, 24, 16)
    }

    /// gpt2-large (774M).
    pub fn large() -> Self {
        Self::sized(1280, 36, 20)
    }

    /// gpt2-xl (1.5B).
    pub fn xl() -> Self {
        Self::sized(1600, 48, 25)
    }

    /// The project's default CPU model: 4 layers, width 128, 4 heads, 256 positions, the GPT-2 vocabulary.
    pub fn tiny() -> Self {
        Self {
            n_positions: 256,
            ..Self::sized(128, 4, 4)
        }
    }

    /// Width 32, 2 heads, 32 positions and `n_layer` layers: the smallest shape that extraction tests
    /// run end to end in a fraction of a second.
    pub fn miniature(n_layer: usize) -> Self {
        Self {
            n_positions: 32,
            ..Self::sized(32, n_layer, 2)
        }
    }

    /// Whether the model takes contexts of `context` tokens; the message says what it takes when not.
    pub fn check_context(&self, context: usize) -> std::result::Result<(), String> {
        if context > self.n_positions {
            return Err(format!(
                "{context} exceeds the model's n_positions; valid: 2..={}",
                self.n_positions
            ));
        }
        Ok(())
    }

    /// A named size: `gpt2`, `gpt2-medium`, `gpt2-large`, `gpt2-xl` (or `small`/`medium`/`large`/`xl`), `tiny`.
    pub fn by_name(name: &str) -> Option<Self> {
        match name {
            "gpt2" | "small" | "gpt2-small" => Some(Self::gpt2()),
            "gpt2-medium" | "medium" => Some(Self::medium()),
            "gpt2-large" | "large" => Some(Self::large()),
            "gpt2-xl" | "xl" => Some(Self::xl()),
            "tiny" => Some(Self::tiny()),
            _ => None,
        }
    }

    pub fn head_dim(&self) -> usize {
        self.n_embd / self.n_head
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::config("config.json", m));
        if self.n_head == 0 || !self.n_embd.is_multiple_of(self.n_head) {
            return bad(format!(
                "n_embd {} is not a multiple of n_head {}",
                self.n_embd, self.n_head
            ));
        }
        if self.n_layer == 0 || self.vocab_size == 0 || self.n_positions == 0 {
            return bad("n_layer, vocab_size and n_positions must be positive".into());
        }
        Ok(())
    }

    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|source| Error::Json {
                path: path.to_path_buf(),
                source,
            })?;
        // Other families load through the `models` crate; what reads GPT-2 only (finetune) says so.
        if let Some(other) = json
            .get("model_type")
            .and_then(|t| t.as_str())
            .filter(|t| *t != "gpt2")
        {
            return Err(Error::Model {
                path: path.to_path_buf(),
                message: format!(
                    "model_type `{other}`: this reads GPT-2 only (finetune is GPT-2 only; extract \
                     and train-sae also read llama, qwen2, qwen3, mistral, gemma2 and gpt_neox)"
                ),
            });
        }
        let cfg: Self = serde_json::from_value(json).map_err(|source| Error::Json {
            path: path.to_path_buf(),
            source,
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// The `config.json` that `transformers` reads back as a `GPT2LMHeadModel`.
    pub fn to_hf_json(&self) -> serde_json::Value {
        serde_json::json!({
            "architectures": ["GPT2LMHeadModel"],
            "model_type": "gpt2",
            "activation_function": "gelu_new",
            "vocab_size": self.vocab_size,
            "n_positions": self.n_positions,
            "n_ctx": self.n_positions,
            "n_embd": self.n_embd,
            "n_layer": self.n_layer,
            "n_head": self.n_head,
            "n_inner": null,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "resid_pdrop": 0.0,
            "embd_pdrop": 0.0,
            "attn_pdrop": 0.0,
            "bos_token_id": 50256,
            "eos_token_id": 50256,
            "tie_word_embeddings": true,
        })
    }
}
