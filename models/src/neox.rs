//! GPT-NeoX (Pythia): LayerNorm, attention and MLP in parallel off the same stream (or in sequence
//! without `use_parallel_residual`), rotary embeddings on the first `rotary_pct` of each head, and
//! a fused q/k/v projection laid out per head (`[q_h | k_h | v_h]` for each head h).
use crate::config::ConfigFile;
use crate::error::{Error, Result};
use crate::hooks::Visitor;
use crate::layers::{attention, attention_mask, LayerNorm, Linear, RopeScaling, Rotary};
use crate::{Depth, Family};
use candle_core::{Module, Tensor};
use candle_nn::VarBuilder;
use gpt2::HookPoint;

/// The `model_type`s this file runs.
pub const MODEL_TYPES: &[&str] = &["gpt_neox"];

/// `random:` shapes of this family.
pub const SHAPES: &[&str] = &["pythia-1.4b"];

/// The hyperparameters of a GPT-NeoX model, read from `config.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct NeoXConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub layer_norm_eps: f64,
    /// Features of each head that are rotated.
    pub rotary_dim: usize,
    pub rope_theta: f64,
    pub rope_scaling: RopeScaling,
    pub max_position_embeddings: usize,
    pub use_parallel_residual: bool,
    /// The exact (erf) GELU; else its tanh form.
    pub exact_gelu: bool,
    pub attention_bias: bool,
    pub tie_word_embeddings: bool,
}

impl NeoXConfig {
    pub fn from_file(f: &ConfigFile) -> Result<Self> {
        let hidden_size = f.usize("hidden_size")?;
        let n_head = f.usize("num_attention_heads")?;
        let head_dim = hidden_size / n_head;
        let act = f.str_or("hidden_act", "gelu")?;
        let exact_gelu = match act.as_str() {
            "gelu" => true,
            "gelu_new" | "gelu_fast" | "gelu_pytorch_tanh" => false,
            other => {
                return Err(Error::config(
                    &f.path,
                    "hidden_act",
                    format!("`{other}` is not supported for gpt_neox; expected gelu or gelu_new"),
                ))
            }
        };
        let (rope_theta, rope_scaling) = f.rope("rotary_emb_base", 10000.0)?;
        let pct = match f.rope_field("partial_rotary_factor") {
            Some(p) => p,
            None => f.f64_or("rotary_pct", 1.0)?,
        };
        Ok(Self {
            vocab_size: f.usize("vocab_size")?,
            hidden_size,
            intermediate_size: f.usize("intermediate_size")?,
            n_layer: f.usize("num_hidden_layers")?,
            n_head,
            layer_norm_eps: f.f64_or("layer_norm_eps", 1e-5)?,
            rotary_dim: (head_dim as f64 * pct) as usize,
            rope_theta,
            rope_scaling,
            max_position_embeddings: f.usize("max_position_embeddings")?,
            use_parallel_residual: f.bool_or("use_parallel_residual", true)?,
            exact_gelu,
            attention_bias: f.bool_or("attention_bias", true)?,
            tie_word_embeddings: f.bool_or("tie_word_embeddings", false)?,
        })
    }

    /// A named shape with real dimensions (weights random): `pythia-1.4b`.
    pub fn shape(name: &str) -> Option<Self> {
        (name == "pythia-1.4b").then_some(Self {
            vocab_size: 50304,
            hidden_size: 2048,
            intermediate_size: 8192,
            n_layer: 24,
            n_head: 16,
            layer_norm_eps: 1e-5,
            rotary_dim: 32,
            rope_theta: 10000.0,
            rope_scaling: RopeScaling::None,
            max_position_embeddings: 2048,
            use_parallel_residual: true,
            exact_gelu: true,
            attention_bias: true,
            tie_word_embeddings: false,
        })
    }
}

#[derive(Debug)]
struct Layer {
    input_norm: LayerNorm,
    post_attention_norm: LayerNorm,
    qkv: Linear,
    dense: Linear,
    up: Linear,
    down: Linear,
}

impl Layer {
    fn new(vb: VarBuilder, cfg: &NeoXConfig) -> Result<Self> {
        let (d, eps, bias) = (cfg.hidden_size, cfg.layer_norm_eps, cfg.attention_bias);
        Ok(Self {
            input_norm: LayerNorm::new(vb.pp("input_layernorm"), d, eps)?,
            post_attention_norm: LayerNorm::new(vb.pp("post_attention_layernorm"), d, eps)?,
            qkv: Linear::new(vb.pp("attention.query_key_value"), d, 3 * d, bias)?,
            dense: Linear::new(vb.pp("attention.dense"), d, d, bias)?,
            up: Linear::new(vb.pp("mlp.dense_h_to_4h"), d, cfg.intermediate_size, true)?,
            down: Linear::new(vb.pp("mlp.dense_4h_to_h"), cfg.intermediate_size, d, true)?,
        })
    }

    fn attention(&self, x: &Tensor, ctx: &Context, cfg: &NeoXConfig) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let (h, hd) = (cfg.n_head, cfg.hidden_size / cfg.n_head);
        // [b, t, 3d] viewed per head as [q | k | v] -> [3, b, h, t, hd].
        let qkv = self
            .qkv
            .forward(x)?
            .reshape((b, t, h, 3, hd))?
            .permute((3, 0, 2, 1, 4))?
            .contiguous()?;
        let q = ctx.rotary.apply(&qkv.get(0)?, &ctx.cos, &ctx.sin)?;
        let k = ctx.rotary.apply(&qkv.get(1)?, &ctx.cos, &ctx.sin)?;
        let a = attention(
            &q,
            &k,
            &qkv.get(2)?,
            &ctx.mask,
            (hd as f64).powf(-0.5),
            None,
        )?;
        Ok(self.dense.forward(&a)?)
    }

    fn mlp(&self, x: &Tensor, cfg: &NeoXConfig) -> Result<Tensor> {
        let up = self.up.forward(x)?;
        let act = if cfg.exact_gelu {
            up.gelu_erf()?
        } else {
            up.gelu()?
        };
        Ok(self.down.forward(&act)?)
    }

    fn forward(
        &self,
        l: usize,
        x: &Tensor,
        ctx: &Context,
        cfg: &NeoXConfig,
        v: &mut Visitor,
    ) -> Result<Tensor> {
        let a = self.attention(&self.input_norm.forward(x)?, ctx, cfg)?;
        let a = v.visit(HookPoint::AttnOut(l), a)?;
        if cfg.use_parallel_residual {
            let m_in = v.visit(HookPoint::MlpIn(l), self.post_attention_norm.forward(x)?)?;
            let m = v.visit(HookPoint::MlpOut(l), self.mlp(&m_in, cfg)?)?;
            // transformers' order of the sum: mlp + attn + stream.
            return Ok(((m + a)? + x)?);
        }
        let x = (a + x)?;
        let m_in = v.visit(HookPoint::MlpIn(l), self.post_attention_norm.forward(&x)?)?;
        let m = v.visit(HookPoint::MlpOut(l), self.mlp(&m_in, cfg)?)?;
        Ok((m + x)?)
    }
}

struct Context {
    rotary: Rotary,
    cos: Tensor,
    sin: Tensor,
    mask: Tensor,
}

/// A GPT-NeoX model, the blocks up to the depth it was loaded with.
#[derive(Debug)]
pub struct NeoX {
    cfg: NeoXConfig,
    embed: Tensor,
    layers: Vec<Layer>,
    /// The final norm and the output head; absent when loaded for hooks only.
    head: Option<(LayerNorm, Tensor)>,
}

impl NeoX {
    pub fn new(cfg: NeoXConfig, vb: VarBuilder, depth: Depth) -> Result<Self> {
        let body = if vb.contains_tensor("gpt_neox.embed_in.weight") {
            vb.pp("gpt_neox")
        } else {
            vb.clone()
        };
        let embed = body.get((cfg.vocab_size, cfg.hidden_size), "embed_in.weight")?;
        let layers = (0..depth.blocks(cfg.n_layer))
            .map(|l| Layer::new(body.pp(format!("layers.{l}")), &cfg))
            .collect::<Result<Vec<_>>>()?;
        let head = if depth == Depth::Full {
            let norm = LayerNorm::new(
                body.pp("final_layer_norm"),
                cfg.hidden_size,
                cfg.layer_norm_eps,
            )?;
            let unembed = if cfg.tie_word_embeddings && !vb.contains_tensor("embed_out.weight") {
                embed.clone()
            } else {
                vb.get((cfg.vocab_size, cfg.hidden_size), "embed_out.weight")?
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

    pub fn config(&self) -> &NeoXConfig {
        &self.cfg
    }
}

impl Family for NeoX {
    fn model_type(&self) -> &str {
        "gpt_neox"
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
        let rotary = Rotary::new(cfg.rotary_dim, cfg.rope_theta, &cfg.rope_scaling);
        let (cos, sin) = rotary.tables(t, dtype, device)?;
        let ctx = Context {
            rotary,
            cos,
            sin,
            mask: attention_mask(t, None, dtype, device)?,
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
