//! The transformer families activations are read from, one file each: GPT-2 (the `gpt2` crate),
//! the Llama block ([`llama`]: Llama, Qwen 2/2.5/3, Mistral), Gemma 2 ([`gemma2`]) and GPT-NeoX /
//! Pythia ([`neox`]). [`Model`] runs any of them with the residual stream, attention and MLP
//! outputs and the MLP input exposed at hook points named as TransformerLens names them.
mod config;
pub mod error;
pub mod gemma2;
mod hooks;
mod layers;
pub mod llama;
mod load;
pub mod neox;
mod random;

pub use error::{Error, Result};
pub use gemma2::{Gemma2, Gemma2Config};
pub use gpt2::{Gpt2, HookPoint, Patch};
pub use llama::{Llama, LlamaConfig};
pub use load::{locate, random_shapes, read_model_type};
pub use neox::{NeoX, NeoXConfig};

use candle_core::{DType, Device, Tensor};
use hooks::Visitor;

/// Every `model_type` in `config.json` that loads.
pub const SUPPORTED_MODEL_TYPES: &[&str] = &[
    "gpt2", "llama", "qwen2", "qwen3", "mistral", "gemma2", "gpt_neox",
];

/// What every family besides GPT-2 offers [`Model`].
trait Family {
    /// `model_type` as `config.json` spells it.
    fn model_type(&self) -> &str;
    fn d_model(&self) -> usize;
    fn n_layer(&self) -> usize;
    fn vocab_size(&self) -> usize;
    fn max_positions(&self) -> usize;
    /// The token embedding [vocab, d_model].
    fn embedding(&self) -> &Tensor;
    /// The output head [vocab, d_model] (the embedding when tied); None when not loaded.
    fn unembedding(&self) -> Option<&Tensor>;
    /// The hyperparameters, for the records of what ran.
    fn config_json(&self) -> serde_json::Value;
    /// The forward pass as far as `v` needs; logits [b, t, vocab] when `want_logits`.
    fn run(&self, tokens: &Tensor, v: &mut Visitor, want_logits: bool) -> Result<Option<Tensor>>;
}

/// How much of a model is read from disk and kept in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// Every block, the final norm and the output head (logits, CE and KL).
    Full,
    /// The first `n` blocks only (hooks up to `blocks.{n-1}` and `blocks.{n}.hook_resid_pre`).
    Blocks(usize),
}

impl Depth {
    /// The blocks to read for this depth of a model with `n_layer` blocks.
    pub fn blocks(self, n_layer: usize) -> usize {
        match self {
            Depth::Full => n_layer,
            Depth::Blocks(n) => n.min(n_layer),
        }
    }

    /// The depth the `hooks` need; `Full` when `logits` are needed too.
    pub fn for_hooks(hooks: &[HookPoint], logits: bool) -> Self {
        if logits || hooks.contains(&HookPoint::LnFinal) {
            return Depth::Full;
        }
        // No point but ln_final depends on the model's depth.
        Depth::Blocks(
            hooks
                .iter()
                .map(|h| h.blocks_needed(usize::MAX))
                .max()
                .unwrap_or(0),
        )
    }
}

/// A model of any supported family.
#[derive(Debug)]
pub enum Model {
    Gpt2(Gpt2),
    Llama(Llama),
    Gemma2(Gemma2),
    NeoX(NeoX),
}

impl Model {
    fn family(&self) -> &dyn Family {
        match self {
            Model::Gpt2(m) => m,
            Model::Llama(m) => m,
            Model::Gemma2(m) => m,
            Model::NeoX(m) => m,
        }
    }

    /// The family's `model_type` as `config.json` spells it (`gpt2`, `llama`, `qwen2`, ...).
    pub fn model_type(&self) -> &str {
        self.family().model_type()
    }

    pub fn d_model(&self) -> usize {
        self.family().d_model()
    }

    pub fn n_layer(&self) -> usize {
        self.family().n_layer()
    }

    pub fn vocab_size(&self) -> usize {
        self.family().vocab_size()
    }

    /// The longest context the model takes.
    pub fn max_positions(&self) -> usize {
        self.family().max_positions()
    }

    /// Whether the model takes contexts of `context` tokens; the message says what it takes.
    pub fn check_context(&self, context: usize) -> std::result::Result<(), String> {
        if let Model::Gpt2(m) = self {
            return m.config().check_context(context);
        }
        let max = self.max_positions();
        if context > max {
            return Err(format!(
                "{context} exceeds the model's maximum context; valid: 2..={max}"
            ));
        }
        Ok(())
    }

    pub fn dtype(&self) -> DType {
        self.embedding().dtype()
    }

    pub fn device(&self) -> &Device {
        self.embedding().device()
    }

    /// The token embedding [vocab, d_model].
    pub fn embedding(&self) -> &Tensor {
        self.family().embedding()
    }

    /// The output head [vocab, d_model] whose rows score the tokens (the embedding when tied;
    /// before Gemma 2's final soft-capping); None when loaded without it.
    pub fn unembedding(&self) -> Option<&Tensor> {
        self.family().unembedding()
    }

    /// The hyperparameters as recorded beside extracted activations: GPT-2's `Gpt2Config`; for the
    /// other families `model_type` and the dimensions.
    pub fn config_json(&self) -> serde_json::Value {
        self.family().config_json()
    }

    pub fn as_gpt2(&self) -> Option<&Gpt2> {
        match self {
            Model::Gpt2(m) => Some(m),
            _ => None,
        }
    }

    pub fn as_gpt2_mut(&mut self) -> Option<&mut Gpt2> {
        match self {
            Model::Gpt2(m) => Some(m),
            _ => None,
        }
    }

    fn run(
        &self,
        tokens: &Tensor,
        hooks: &[HookPoint],
        patches: &[(HookPoint, Patch)],
        want_logits: bool,
    ) -> Result<(Vec<Tensor>, Option<Tensor>)> {
        let mut v = Visitor::new(hooks, patches, self.n_layer(), want_logits)?;
        let logits = self.family().run(tokens, &mut v, want_logits)?;
        Ok((v.finish()?, logits))
    }

    /// The activations at each hook point, each [B, T, d_model], in request order. Stops after the
    /// last block any hook needs.
    pub fn forward_hooks(&self, tokens: &Tensor, hooks: &[HookPoint]) -> Result<Vec<Tensor>> {
        Ok(self.run(tokens, hooks, &[], false)?.0)
    }

    /// Next-token logits [B, T, vocab].
    pub fn forward_logits(&self, tokens: &Tensor) -> Result<Tensor> {
        self.forward_logits_patched_many(tokens, &[])
    }

    /// Logits with the stream at `hook` replaced by `patch(stream)`.
    pub fn forward_logits_patched(
        &self,
        tokens: &Tensor,
        hook: HookPoint,
        patch: Patch,
    ) -> Result<Tensor> {
        self.forward_logits_patched_many(tokens, &[(hook, patch)])
    }

    /// Logits with the stream at every listed hook point replaced by its patch's output, in one
    /// forward; patches of one point apply in list order.
    pub fn forward_logits_patched_many(
        &self,
        tokens: &Tensor,
        patches: &[(HookPoint, Patch)],
    ) -> Result<Tensor> {
        self.run(tokens, &[], patches, true)?
            .1
            .ok_or_else(|| candle_core::Error::Msg("logits were not computed".into()).into())
    }

    /// Mean next-token cross-entropy of `logits` [B, T, V] for `tokens` [B, T], in f32.
    pub fn next_token_loss(logits: &Tensor, tokens: &Tensor) -> Result<Tensor> {
        Ok(Gpt2::next_token_loss(logits, tokens)?)
    }

    /// The model's mean next-token cross-entropy on `tokens`.
    pub fn forward_loss(&self, tokens: &Tensor) -> Result<Tensor> {
        Self::next_token_loss(&self.forward_logits(tokens)?, tokens)
    }
}

/// GPT-2 runs its own forward (fused kernels on CUDA); hooks and patches pass through.
impl Family for Gpt2 {
    fn model_type(&self) -> &str {
        "gpt2"
    }
    fn d_model(&self) -> usize {
        Gpt2::d_model(self)
    }
    fn n_layer(&self) -> usize {
        self.config().n_layer
    }
    fn vocab_size(&self) -> usize {
        self.config().vocab_size
    }
    fn max_positions(&self) -> usize {
        self.config().n_positions
    }
    fn embedding(&self) -> &Tensor {
        self.token_embedding()
    }
    fn unembedding(&self) -> Option<&Tensor> {
        Some(self.token_embedding())
    }
    fn config_json(&self) -> serde_json::Value {
        serde_json::to_value(self.config()).unwrap_or_default()
    }

    fn run(&self, tokens: &Tensor, v: &mut Visitor, want_logits: bool) -> Result<Option<Tensor>> {
        if want_logits {
            return Ok(Some(self.forward_logits_patched_many(tokens, v.patches())?));
        }
        let captured = self.forward_hooks(tokens, v.hooks())?;
        v.fill(captured);
        Ok(None)
    }
}

/// `model_type` and the dimensions of a family's model, for records.
fn dimensions_json(m: &dyn Family) -> serde_json::Value {
    serde_json::json!({
        "model_type": m.model_type(),
        "hidden_size": m.d_model(),
        "num_hidden_layers": m.n_layer(),
        "vocab_size": m.vocab_size(),
        "max_position_embeddings": m.max_positions(),
    })
}

/// An error when a forward needs more than was loaded.
fn check_loaded(depth: usize, loaded: usize, want_logits: bool, has_head: bool) -> Result<()> {
    if depth > loaded || (want_logits && !has_head) {
        return Err(Error::Model {
            path: "(loaded model)".into(),
            message: format!(
                "loaded with {loaded} blocks{}, the forward needs {depth}{}; load it with Depth::Full",
                if has_head { "" } else { " and no output head" },
                if want_logits { " and logits" } else { "" }
            ),
        });
    }
    Ok(())
}

/// Logits [b, t, vocab] of the normalized stream [b, t, d] through the head [vocab, d].
fn unembed(normed: &Tensor, head: &Tensor) -> Result<Tensor> {
    let (b, t, d) = normed.dims3()?;
    let logits = normed.reshape((b * t, d))?.matmul(&head.t()?)?;
    Ok(logits.reshape((b, t, head.dim(0)?))?)
}
