//! The Llama block and the families that share it: Llama 2/3 (rope scaling), Qwen 2/2.5 (q/k/v
//! bias), Qwen 3 (per-head q/k RMSNorm) and Mistral (sliding-window attention).
//! Pre-norm residual blocks: RMSNorm, rotary grouped-query attention, RMSNorm, SwiGLU.
use crate::config::ConfigFile;
use crate::error::{Error, Result};
use crate::hooks::Visitor;
use crate::layers::{attention, window_masks, Linear, RmsNorm, RopeScaling, Rotary};
use crate::{Depth, Family};
use candle_core::{Module, Tensor};
use candle_nn::VarBuilder;
use gpt2::HookPoint;
use std::collections::HashMap;

/// The `model_type`s this file runs.
pub const MODEL_TYPES: &[&str] = &["llama", "qwen2", "qwen3", "mistral"];

/// `random:` shapes of this family.
pub const SHAPES: &[&str] = &["llama-3.1-8b", "qwen2.5-7b"];

/// The hyperparameters of one Llama-block model, read from `config.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    pub model_type: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    pub rope_scaling: RopeScaling,
    pub max_position_embeddings: usize,
    /// Biases on q, k and v (Qwen 2, or `attention_bias`).
    pub qkv_bias: bool,
    /// A bias on the output projection (`attention_bias` outside Qwen 2).
    pub o_bias: bool,
    pub mlp_bias: bool,
    /// RMSNorm of each head's query and key before the rotation (Qwen 3).
    pub qk_norm: bool,
    /// The sliding window of each layer; None for full causal attention.
    pub windows: Vec<Option<usize>>,
    pub tie_word_embeddings: bool,
}

impl LlamaConfig {
    pub fn from_file(f: &ConfigFile) -> Result<Self> {
        let model_type = f.model_type()?;
        let hidden_size = f.usize("hidden_size")?;
        let n_layer = f.usize("num_hidden_layers")?;
        let n_head = f.usize("num_attention_heads")?;
        let n_kv_head = f.opt_usize("num_key_value_heads")?.unwrap_or(n_head);
        let head_dim = f.opt_usize("head_dim")?.unwrap_or(hidden_size / n_head);
        let act = f.str_or("hidden_act", "silu")?;
        if act != "silu" {
            return Err(Error::config(
                &f.path,
                "hidden_act",
                format!("`{act}` is not supported for {model_type}; expected silu"),
            ));
        }
        if !n_head.is_multiple_of(n_kv_head) {
            return Err(Error::config(
                &f.path,
                "num_key_value_heads",
                format!("{n_kv_head} does not divide num_attention_heads {n_head}"),
            ));
        }
        let (rope_theta, rope_scaling) = f.rope("rope_theta", 10000.0)?;
        let attention_bias = f.bool_or("attention_bias", false)?;
        let qwen2 = model_type == "qwen2";
        let windows = Self::windows(f, &model_type, n_layer)?;
        Ok(Self {
            vocab_size: f.usize("vocab_size")?,
            hidden_size,
            intermediate_size: f.usize("intermediate_size")?,
            n_layer,
            n_head,
            n_kv_head,
            head_dim,
            rms_norm_eps: f.f64_or("rms_norm_eps", 1e-6)?,
            rope_theta,
            rope_scaling,
            max_position_embeddings: f.usize("max_position_embeddings")?,
            qkv_bias: qwen2 || attention_bias,
            o_bias: attention_bias && !qwen2,
            mlp_bias: f.bool_or("mlp_bias", false)?,
            qk_norm: model_type == "qwen3",
            windows,
            tie_word_embeddings: f.bool_or("tie_word_embeddings", false)?,
            model_type,
        })
    }

    /// Mistral slides every layer when `sliding_window` is set; Qwen 2/3 only with
    /// `use_sliding_window`, from layer `max_window_layers` on; `layer_types` overrides both.
    fn windows(f: &ConfigFile, model_type: &str, n_layer: usize) -> Result<Vec<Option<usize>>> {
        let window = f.opt_usize("sliding_window")?;
        let sliding: Vec<bool> = match (f.layer_types(n_layer)?, model_type) {
            (Some(types), _) => types,
            (None, "mistral") => vec![true; n_layer],
            (None, "qwen2" | "qwen3") if f.bool_or("use_sliding_window", false)? => {
                let from = f.opt_usize("max_window_layers")?.unwrap_or(n_layer);
                (0..n_layer).map(|l| l >= from).collect()
            }
            _ => vec![false; n_layer],
        };
        Ok(sliding
            .into_iter()
            .map(|s| if s { window } else { None })
            .collect())
    }

    /// A named shape with real dimensions (weights random): `llama-3.1-8b`, `qwen2.5-7b`.
    pub fn shape(name: &str) -> Option<Self> {
        match name {
            "llama-3.1-8b" => Some(Self {
                model_type: "llama".into(),
                vocab_size: 128256,
                hidden_size: 4096,
                intermediate_size: 14336,
                n_layer: 32,
                n_head: 32,
                n_kv_head: 8,
                head_dim: 128,
                rms_norm_eps: 1e-5,
                rope_theta: 500000.0,
                rope_scaling: RopeScaling::Llama3 {
                    factor: 8.0,
                    low_freq_factor: 1.0,
                    high_freq_factor: 4.0,
                    original_max_position_embeddings: 8192.0,
                },
                max_position_embeddings: 131072,
                qkv_bias: false,
                o_bias: false,
                mlp_bias: false,
                qk_norm: false,
                windows: vec![None; 32],
                tie_word_embeddings: false,
            }),
            "qwen2.5-7b" => Some(Self {
                model_type: "qwen2".into(),
                vocab_size: 152064,
                hidden_size: 3584,
                intermediate_size: 18944,
                n_layer: 28,
                n_head: 28,
                n_kv_head: 4,
                head_dim: 128,
                rms_norm_eps: 1e-6,
                rope_theta: 1000000.0,
                rope_scaling: RopeScaling::None,
                max_position_embeddings: 32768,
                qkv_bias: true,
                o_bias: false,
                mlp_bias: false,
                qk_norm: false,
                windows: vec![None; 28],
                tie_word_embeddings: false,
            }),
            _ => None,
        }
    }
}

#[derive(Debug)]
struct Layer {
    input_norm: RmsNorm,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    post_attention_norm: RmsNorm,
    gate: Linear,
    up: Linear,
    down: Linear,
    window: Option<usize>,
}

impl Layer {
    fn new(vb: VarBuilder, cfg: &LlamaConfig, l: usize) -> Result<Self> {
        let (d, hd) = (cfg.hidden_size, cfg.head_dim);
        let eps = cfg.rms_norm_eps;
        let attn = vb.pp("self_attn");
        let mlp = vb.pp("mlp");
        let head_norm = |name: &str| -> Result<Option<RmsNorm>> {
            Ok(if cfg.qk_norm {
                Some(RmsNorm::new(attn.pp(name), hd, eps, false)?)
            } else {
                None
            })
        };
        Ok(Self {
            input_norm: RmsNorm::new(vb.pp("input_layernorm"), d, eps, false)?,
            q: Linear::new(attn.pp("q_proj"), d, cfg.n_head * hd, cfg.qkv_bias)?,
            k: Linear::new(attn.pp("k_proj"), d, cfg.n_kv_head * hd, cfg.qkv_bias)?,
            v: Linear::new(attn.pp("v_proj"), d, cfg.n_kv_head * hd, cfg.qkv_bias)?,
            o: Linear::new(attn.pp("o_proj"), cfg.n_head * hd, d, cfg.o_bias)?,
            q_norm: head_norm("q_norm")?,
            k_norm: head_norm("k_norm")?,
            post_attention_norm: RmsNorm::new(vb.pp("post_attention_layernorm"), d, eps, false)?,
            gate: Linear::new(mlp.pp("gate_proj"), d, cfg.intermediate_size, cfg.mlp_bias)?,
            up: Linear::new(mlp.pp("up_proj"), d, cfg.intermediate_size, cfg.mlp_bias)?,
            down: Linear::new(mlp.pp("down_proj"), cfg.intermediate_size, d, cfg.mlp_bias)?,
            window: cfg.windows[l],
        })
    }

    /// [b, t, heads · hd] -> [b, heads, t, hd], head-normed (Qwen 3) and rotated.
    fn heads(
        x: &Tensor,
        heads: usize,
        norm: Option<&RmsNorm>,
        rope: (&Rotary, &Tensor, &Tensor),
    ) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let mut x = x.reshape((b, t, heads, ()))?;
        if let Some(n) = norm {
            x = n.forward(&x)?;
        }
        let x = x.transpose(1, 2)?;
        Ok(rope.0.apply(&x, rope.1, rope.2)?)
    }

    fn forward(
        &self,
        l: usize,
        x: &Tensor,
        ctx: &Context,
        cfg: &LlamaConfig,
        v: &mut Visitor,
    ) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let h = self.input_norm.forward(x)?;
        let rope = (&ctx.rotary, &ctx.cos, &ctx.sin);
        let q = Self::heads(&self.q.forward(&h)?, cfg.n_head, self.q_norm.as_ref(), rope)?;
        let k = Self::heads(
            &self.k.forward(&h)?,
            cfg.n_kv_head,
            self.k_norm.as_ref(),
            rope,
        )?;
        let val = self
            .v
            .forward(&h)?
            .reshape((b, t, cfg.n_kv_head, cfg.head_dim))?
            .transpose(1, 2)?;
        let scale = 1.0 / (cfg.head_dim as f64).sqrt();
        let a = attention(&q, &k, &val, &ctx.masks[&self.window], scale, None)?;
        let a = v.visit(HookPoint::AttnOut(l), self.o.forward(&a)?)?;
        let x = (x + a)?;
        let m = v.visit(HookPoint::MlpIn(l), self.post_attention_norm.forward(&x)?)?;
        let gated = (self.gate.forward(&m)?.silu()? * self.up.forward(&m)?)?;
        let m = v.visit(HookPoint::MlpOut(l), self.down.forward(&gated)?)?;
        Ok((x + m)?)
    }
}

/// What every layer of one forward shares: rotary tables and a mask per window size.
struct Context {
    rotary: Rotary,
    cos: Tensor,
    sin: Tensor,
    masks: HashMap<Option<usize>, Tensor>,
}

/// A Llama-block model, the blocks up to the depth it was loaded with.
#[derive(Debug)]
pub struct Llama {
    cfg: LlamaConfig,
    embed: Tensor,
    layers: Vec<Layer>,
    /// The final norm and the output head; absent when loaded for hooks only.
    head: Option<(RmsNorm, Tensor)>,
}

impl Llama {
    /// Builds the model from Hugging Face names (`model.embed_tokens.weight`, ...), reading the
    /// first `depth` blocks (all of them and the head for [`Depth::Full`]).
    pub fn new(cfg: LlamaConfig, vb: VarBuilder, depth: Depth) -> Result<Self> {
        let n = depth.blocks(cfg.n_layer);
        let body = if vb.contains_tensor("model.embed_tokens.weight") {
            vb.pp("model")
        } else {
            vb.clone()
        };
        let embed = body.get((cfg.vocab_size, cfg.hidden_size), "embed_tokens.weight")?;
        let layers = (0..n)
            .map(|l| Layer::new(body.pp(format!("layers.{l}")), &cfg, l))
            .collect::<Result<Vec<_>>>()?;
        let head = if depth == Depth::Full {
            let norm = RmsNorm::new(body.pp("norm"), cfg.hidden_size, cfg.rms_norm_eps, false)?;
            let unembed = if vb.contains_tensor("lm_head.weight") || !cfg.tie_word_embeddings {
                vb.get((cfg.vocab_size, cfg.hidden_size), "lm_head.weight")?
            } else {
                embed.clone()
            };
            Some((norm, unembed))
        } else {
            None
        };
        Ok(Self {
            cfg,
            embed,
            layers,
            head,
        })
    }

    pub fn config(&self) -> &LlamaConfig {
        &self.cfg
    }
}

impl Family for Llama {
    fn model_type(&self) -> &str {
        &self.cfg.model_type
    }
    fn d_model(&self) -> usize {
        self.cfg.hidden_size
    }
    fn n_layer(&self) -> usize {
        self.cfg.n_layer
    }
    fn vocab_size(&self) -> usize {
        self.cfg.vocab_size
    }
    fn max_positions(&self) -> usize {
        self.cfg.max_position_embeddings
    }
    fn embedding(&self) -> &Tensor {
        &self.embed
    }
    fn unembedding(&self) -> Option<&Tensor> {
        self.head.as_ref().map(|(_, u)| u)
    }
    fn config_json(&self) -> serde_json::Value {
        crate::dimensions_json(self)
    }

    fn run(&self, tokens: &Tensor, v: &mut Visitor, want_logits: bool) -> Result<Option<Tensor>> {
        let cfg = &self.cfg;
        let depth = v.depth();
        crate::check_loaded(depth, self.layers.len(), want_logits, self.head.is_some())?;
        let (b, t) = tokens.dims2()?;
        let (dtype, device) = (self.embed.dtype(), self.embed.device());
        let rotary = Rotary::new(cfg.head_dim, cfg.rope_theta, &cfg.rope_scaling);
        let (cos, sin) = rotary.tables(t, dtype, device)?;
        let masks = window_masks(
            self.layers[..depth].iter().map(|l| l.window),
            t,
            dtype,
            device,
        )?;
        let ctx = Context {
            rotary,
            cos,
            sin,
            masks,
        };
        let mut x = self
            .embed
            .index_select(&tokens.flatten_all()?, 0)?
            .reshape((b, t, cfg.hidden_size))?;
        for (l, layer) in self.layers[..depth].iter().enumerate() {
            x = v.visit(HookPoint::ResidPre(l), x)?;
            x = layer.forward(l, &x, &ctx, cfg, v)?;
            x = v.visit(HookPoint::ResidPost(l), x)?;
        }
        if depth < cfg.n_layer {
            x = v.visit(HookPoint::ResidPre(depth), x)?;
        }
        match &self.head {
            Some((norm, unembed)) if v.needs_final(want_logits, cfg.n_layer) => {
                let normed = v.visit(HookPoint::LnFinal, norm.forward(&x)?)?;
                Ok(if want_logits {
                    Some(crate::unembed(&normed, unembed)?)
                } else {
                    None
                })
            }
            _ => Ok(None),
        }
    }
}
