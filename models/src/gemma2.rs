//! Gemma 2: RMSNorm scaled by `1 + w`, norms before and after both attention and MLP, GeGLU
//! (tanh GELU), attention-score and final-logit soft-capping, sliding-window attention on every
//! other layer, embeddings scaled by √d_model and scores by `query_pre_attn_scalar^-1/2`.
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
pub const MODEL_TYPES: &[&str] = &["gemma2"];

/// `random:` shapes of this family.
pub const SHAPES: &[&str] = &["gemma-2-2b", "gemma-2-9b"];

/// The hyperparameters of a Gemma 2 model, read from `config.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct Gemma2Config {
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
    pub query_pre_attn_scalar: f64,
    pub attn_logit_softcapping: Option<f64>,
    pub final_logit_softcapping: Option<f64>,
    /// The sliding window of each layer; None for full causal attention.
    pub windows: Vec<Option<usize>>,
}

impl Gemma2Config {
    pub fn from_file(f: &ConfigFile) -> Result<Self> {
        let n_layer = f.usize("num_hidden_layers")?;
        let n_head = f.usize("num_attention_heads")?;
        let act = f.str_or("hidden_activation", "gelu_pytorch_tanh")?;
        if !matches!(act.as_str(), "gelu_pytorch_tanh" | "gelu_new" | "gelu_fast") {
            return Err(Error::config(
                &f.path,
                "hidden_activation",
                format!("`{act}` is not supported for gemma2; expected gelu_pytorch_tanh"),
            ));
        }
        let window = f.opt_usize("sliding_window")?.or(Some(4096));
        // transformers' default: layers 0, 2, 4, ... slide.
        let sliding = f
            .layer_types(n_layer)?
            .unwrap_or_else(|| (0..n_layer).map(|l| l % 2 == 0).collect());
        let (rope_theta, rope_scaling) = f.rope("rope_theta", 10000.0)?;
        let head_dim = f.opt_usize("head_dim")?.unwrap_or(256);
        Ok(Self {
            vocab_size: f.usize("vocab_size")?,
            hidden_size: f.usize("hidden_size")?,
            intermediate_size: f.usize("intermediate_size")?,
            n_layer,
            n_head,
            n_kv_head: f.opt_usize("num_key_value_heads")?.unwrap_or(n_head),
            head_dim,
            rms_norm_eps: f.f64_or("rms_norm_eps", 1e-6)?,
            rope_theta,
            rope_scaling,
            max_position_embeddings: f.usize("max_position_embeddings")?,
            query_pre_attn_scalar: f.f64_or("query_pre_attn_scalar", head_dim as f64)?,
            attn_logit_softcapping: f.opt_f64("attn_logit_softcapping")?,
            final_logit_softcapping: f.opt_f64("final_logit_softcapping")?,
            windows: sliding
                .into_iter()
                .map(|s| if s { window } else { None })
                .collect(),
        })
    }

    /// A named shape with real dimensions (weights random): `gemma-2-2b`, `gemma-2-9b`.
    pub fn shape(name: &str) -> Option<Self> {
        let (hidden_size, intermediate_size, n_layer, n_head, n_kv_head) = match name {
            "gemma-2-2b" => (2304, 9216, 26, 8, 4),
            "gemma-2-9b" => (3584, 14336, 42, 16, 8),
            _ => return None,
        };
        Some(Self {
            vocab_size: 256000,
            hidden_size,
            intermediate_size,
            n_layer,
            n_head,
            n_kv_head,
            head_dim: 256,
            rms_norm_eps: 1e-6,
            rope_theta: 10000.0,
            rope_scaling: RopeScaling::None,
            max_position_embeddings: 8192,
            query_pre_attn_scalar: 256.0,
            attn_logit_softcapping: Some(50.0),
            final_logit_softcapping: Some(30.0),
            windows: (0..n_layer).map(|l| (l % 2 == 0).then_some(4096)).collect(),
        })
    }
}

#[derive(Debug)]
struct Layer {
    input_norm: RmsNorm,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    post_attention_norm: RmsNorm,
    pre_feedforward_norm: RmsNorm,
    gate: Linear,
    up: Linear,
    down: Linear,
    post_feedforward_norm: RmsNorm,
    window: Option<usize>,
}

impl Layer {
    fn new(vb: VarBuilder, cfg: &Gemma2Config, l: usize) -> Result<Self> {
        let (d, hd, eps) = (cfg.hidden_size, cfg.head_dim, cfg.rms_norm_eps);
        let norm = |name: &str| RmsNorm::new(vb.pp(name), d, eps, true);
        let attn = vb.pp("self_attn");
        let mlp = vb.pp("mlp");
        Ok(Self {
            input_norm: norm("input_layernorm")?,
            q: Linear::new(attn.pp("q_proj"), d, cfg.n_head * hd, false)?,
            k: Linear::new(attn.pp("k_proj"), d, cfg.n_kv_head * hd, false)?,
            v: Linear::new(attn.pp("v_proj"), d, cfg.n_kv_head * hd, false)?,
            o: Linear::new(attn.pp("o_proj"), cfg.n_head * hd, d, false)?,
            post_attention_norm: norm("post_attention_layernorm")?,
            pre_feedforward_norm: norm("pre_feedforward_layernorm")?,
            gate: Linear::new(mlp.pp("gate_proj"), d, cfg.intermediate_size, false)?,
            up: Linear::new(mlp.pp("up_proj"), d, cfg.intermediate_size, false)?,
            down: Linear::new(mlp.pp("down_proj"), cfg.intermediate_size, d, false)?,
            post_feedforward_norm: norm("post_feedforward_layernorm")?,
            window: cfg.windows[l],
        })
    }

    fn forward(
        &self,
        l: usize,
        x: &Tensor,
        ctx: &Context,
        cfg: &Gemma2Config,
        v: &mut Visitor,
    ) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let h = self.input_norm.forward(x)?;
        let heads = |y: Tensor, n: usize| -> Result<Tensor> {
            Ok(y.reshape((b, t, n, cfg.head_dim))?.transpose(1, 2)?)
        };
        let q = ctx
            .rotary
            .apply(&heads(self.q.forward(&h)?, cfg.n_head)?, &ctx.cos, &ctx.sin)?;
        let k = ctx.rotary.apply(
            &heads(self.k.forward(&h)?, cfg.n_kv_head)?,
            &ctx.cos,
            &ctx.sin,
        )?;
        let val = heads(self.v.forward(&h)?, cfg.n_kv_head)?;
        let scale = cfg.query_pre_attn_scalar.powf(-0.5);
        let mask = &ctx.masks[&self.window];
        let a = attention(&q, &k, &val, mask, scale, cfg.attn_logit_softcapping)?;
        let a = self.post_attention_norm.forward(&self.o.forward(&a)?)?;
        let x = (x + v.visit(HookPoint::AttnOut(l), a)?)?;
        let m = v.visit(HookPoint::MlpIn(l), self.pre_feedforward_norm.forward(&x)?)?;
        let gated = (self.gate.forward(&m)?.gelu()? * self.up.forward(&m)?)?;
        let m = self
            .post_feedforward_norm
            .forward(&self.down.forward(&gated)?)?;
        Ok((x + v.visit(HookPoint::MlpOut(l), m)?)?)
    }
}

struct Context {
    rotary: Rotary,
    cos: Tensor,
    sin: Tensor,
    masks: HashMap<Option<usize>, Tensor>,
}

/// A Gemma 2 model, the blocks up to the depth it was loaded with; the output head is the
/// embedding (Gemma ties them).
#[derive(Debug)]
pub struct Gemma2 {
    cfg: Gemma2Config,
    embed: Tensor,
    layers: Vec<Layer>,
    norm: Option<RmsNorm>,
}

impl Gemma2 {
    pub fn new(cfg: Gemma2Config, vb: VarBuilder, depth: Depth) -> Result<Self> {
        let body = if vb.contains_tensor("model.embed_tokens.weight") {
            vb.pp("model")
        } else {
            vb
        };
        let embed = body.get((cfg.vocab_size, cfg.hidden_size), "embed_tokens.weight")?;
        let layers = (0..depth.blocks(cfg.n_layer))
            .map(|l| Layer::new(body.pp(format!("layers.{l}")), &cfg, l))
            .collect::<Result<Vec<_>>>()?;
        let norm = if depth == Depth::Full {
            Some(RmsNorm::new(
                body.pp("norm"),
                cfg.hidden_size,
                cfg.rms_norm_eps,
                true,
            )?)
        } else {
            None
        };
        Ok(Self {
            cfg,
            embed,
            layers,
            norm,
        })
    }

    pub fn config(&self) -> &Gemma2Config {
        &self.cfg
    }
}

impl Family for Gemma2 {
    fn model_type(&self) -> &str {
        "gemma2"
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
        self.norm.as_ref().map(|_| &self.embed)
    }
    fn config_json(&self) -> serde_json::Value {
        crate::dimensions_json(self)
    }

    fn run(&self, tokens: &Tensor, v: &mut Visitor, want_logits: bool) -> Result<Option<Tensor>> {
        let cfg = &self.cfg;
        let depth = v.depth();
        crate::check_loaded(depth, self.layers.len(), want_logits, self.norm.is_some())?;
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
        // transformers scales by √d rounded to the model's dtype.
        let normalizer = Tensor::new((cfg.hidden_size as f32).sqrt(), device)?.to_dtype(dtype)?;
        let mut x = self
            .embed
            .index_select(&tokens.flatten_all()?, 0)?
            .reshape((b, t, cfg.hidden_size))?
            .broadcast_mul(&normalizer)?;
        for (l, layer) in self.layers[..depth].iter().enumerate() {
            x = v.visit(HookPoint::ResidPre(l), x)?;
            x = layer.forward(l, &x, &ctx, cfg, v)?;
            x = v.visit(HookPoint::ResidPost(l), x)?;
        }
        if depth < cfg.n_layer {
            x = v.visit(HookPoint::ResidPre(depth), x)?;
        }
        match &self.norm {
            Some(norm) if v.needs_final(want_logits, cfg.n_layer) => {
                let normed = v.visit(HookPoint::LnFinal, norm.forward(&x)?)?;
                if !want_logits {
                    return Ok(None);
                }
                let logits = crate::unembed(&normed, &self.embed)?;
                Ok(Some(match cfg.final_logit_softcapping {
                    Some(cap) => ((logits / cap)?.tanh()? * cap)?,
                    None => logits,
                }))
            }
            _ => Ok(None),
        }
    }
}
