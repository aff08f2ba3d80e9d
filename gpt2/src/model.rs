//! The GPT-2 forward pass (Hugging Face layout: Conv1D weights stored as [in, out], tied output head).
use super::{Gpt2Config, HookPoint};
use crate::error::{Error, Result};
use crate::ops::{self, Activation, Epilogue};
use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Init, VarBuilder};
use std::collections::HashMap;
use std::sync::Mutex;

/// A patch applied to the residual stream at one hook point; returns the replacement.
pub type Patch<'a> = &'a dyn Fn(&Tensor) -> candle_core::Result<Tensor>;

const WEIGHT_STD: f64 = 0.02;

#[derive(Debug, Clone)]
struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f64,
}

impl LayerNorm {
    fn new(vb: VarBuilder, d: usize, eps: f64) -> Result<Self> {
        let weight = vb.get_with_hints(d, "weight", Init::Const(1.0))?;
        let bias = vb.get_with_hints(d, "bias", Init::Const(0.0))?;
        Ok(Self { weight, bias, eps })
    }
}

impl LayerNorm {
    /// Forward-only layer norm (one kernel on CUDA).
    fn forward_fused(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        ops::layer_norm(x, &self.weight, &self.bias, self.eps as f32)
    }

    /// Layer norm with gradients for all three inputs.
    fn forward_train(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        ops::layer_norm_train(x, &self.weight, &self.bias, self.eps as f32)
    }
}

impl Module for LayerNorm {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        candle_nn::ops::layer_norm(&x.contiguous()?, &self.weight, &self.bias, self.eps as f32)
    }
}

/// GPT-2's `Conv1D`: `y = x W + b` with `W` stored as [in, out].
#[derive(Debug, Clone)]
struct Conv1D {
    weight: Tensor,
    bias: Tensor,
}

impl Conv1D {
    fn new(vb: VarBuilder, d_in: usize, d_out: usize, std: f64) -> Result<Self> {
        let weight = vb.get_with_hints(
            (d_in, d_out),
            "weight",
            Init::Randn {
                mean: 0.0,
                stdev: std,
            },
        )?;
        let bias = vb.get_with_hints(d_out, "bias", Init::Const(0.0))?;
        Ok(Self { weight, bias })
    }
}

impl Module for Conv1D {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        // One 2-D GEMM over all tokens rather than a batched one.
        let dims = x.dims();
        let d_in = dims[dims.len() - 1];
        let d_out = self.weight.dim(1)?;
        let n = x.elem_count() / d_in;
        let y = x.reshape((n, d_in))?.matmul(&self.weight)?;
        let y = if x.device().is_cpu() {
            y.broadcast_add(&self.bias)?
        } else {
            // On CUDA a broadcast add takes a strided kernel with 64-bit index division per
            // element; a rank-1 GEMM (ones x bias) and a contiguous add cost far less.
            let ones = Tensor::ones((n, 1), y.dtype(), y.device())?;
            (y + ones.matmul(&self.bias.reshape((1, d_out))?)?)?
        };
        let mut out_dims = dims.to_vec();
        *out_dims.last_mut().expect("non-empty dims") = d_out;
        y.reshape(out_dims)
    }
}

#[derive(Debug, Clone, Copy)]
struct AttentionOptions {
    differentiable: bool,
    chunk: Option<usize>,
    /// Run the block through the fused forward ops (CUDA, inference only).
    fused: bool,
}

/// Query-chunk length of the causal attention for long sequences.
pub const DEFAULT_ATTENTION_CHUNK: usize = 256;

#[derive(Debug, Clone)]
struct Block {
    ln_1: LayerNorm,
    c_attn: Conv1D,
    attn_proj: Conv1D,
    ln_2: LayerNorm,
    c_fc: Conv1D,
    mlp_proj: Conv1D,
    n_head: usize,
}

impl Block {
    fn new(vb: VarBuilder, cfg: &Gpt2Config) -> Result<Self> {
        let d = cfg.n_embd;
        let proj_std = WEIGHT_STD / (2.0 * cfg.n_layer as f64).sqrt();
        Ok(Self {
            ln_1: LayerNorm::new(vb.pp("ln_1"), d, cfg.layer_norm_epsilon)?,
            c_attn: Conv1D::new(vb.pp("attn.c_attn"), d, 3 * d, WEIGHT_STD)?,
            attn_proj: Conv1D::new(vb.pp("attn.c_proj"), d, d, proj_std)?,
            ln_2: LayerNorm::new(vb.pp("ln_2"), d, cfg.layer_norm_epsilon)?,
            c_fc: Conv1D::new(vb.pp("mlp.c_fc"), d, 4 * d, WEIGHT_STD)?,
            mlp_proj: Conv1D::new(vb.pp("mlp.c_proj"), 4 * d, d, proj_std)?,
            n_head: cfg.n_head,
        })
    }

    fn attention(&self, x: &Tensor, masks: &MaskCache, opts: AttentionOptions) -> Result<Tensor> {
        let (b, t, d) = x.dims3()?;
        let (h, hd) = (self.n_head, d / self.n_head);
        // [b, t, 3d] -> [3, b, h, t, hd] in one copy; q, k, v are then contiguous slices.
        let qkv = self
            .c_attn
            .forward(x)?
            .reshape((b, t, 3, h, hd))?
            .permute((2, 0, 3, 1, 4))?
            .contiguous()?;
        let q = (qkv.get(0)? * (1.0 / (hd as f64).sqrt()))?;
        let k = qkv.get(1)?;
        let v = qkv.get(2)?;
        // Causal attention by query chunks: chunk i only sees keys 0..end(i), which skips most of
        // the masked upper triangle (62% of the score traffic at t = 1024, chunk 256).
        let chunk = match opts.chunk {
            Some(c) if c < t => c,
            _ => t,
        };
        let mut parts = Vec::with_capacity(t.div_ceil(chunk));
        for start in (0..t).step_by(chunk) {
            let len = chunk.min(t - start);
            let keys = start + len;
            let m = masks.get(b, h, t, start, len)?;
            let q_c = if len == t {
                q.clone()
            } else {
                q.narrow(2, start, len)?
            };
            let (k_c, v_c) = if keys == t {
                (k.clone(), v.clone())
            } else {
                (k.narrow(2, 0, keys)?, v.narrow(2, 0, keys)?)
            };
            let scores = q_c.matmul(&k_c.t()?)?.broadcast_add(&m)?;
            parts.push(candle_nn::ops::softmax_last_dim(&scores)?.matmul(&v_c)?);
        }
        let y = if parts.len() == 1 {
            parts.pop().expect("one part")
        } else {
            Tensor::cat(&parts, 2)?
        };
        let y = y.transpose(1, 2)?.contiguous()?.reshape((b, t, d))?;
        Ok(self.attn_proj.forward(&y)?)
    }

    /// The block through the fused ops: four GEMMs with their bias, GELU and residual adds in the
    /// epilogue, and one attention kernel reading q, k, v straight from the `c_attn` output.
    fn forward_fused(&self, x: &Tensor) -> Result<Tensor> {
        let qkv = ops::linear(
            &self.ln_1.forward_fused(x)?,
            &self.c_attn.weight,
            &self.c_attn.bias,
            Epilogue::Bias,
        )?;
        let attn = ops::causal_attention(&qkv, self.n_head)?;
        let x = ops::linear(
            &attn,
            &self.attn_proj.weight,
            &self.attn_proj.bias,
            Epilogue::BiasResidual(x),
        )?;
        let m = ops::linear(
            &self.ln_2.forward_fused(&x)?,
            &self.c_fc.weight,
            &self.c_fc.bias,
            Epilogue::BiasGelu,
        )?;
        Ok(ops::linear(
            &m,
            &self.mlp_proj.weight,
            &self.mlp_proj.bias,
            Epilogue::BiasResidual(&x),
        )?)
    }

    /// The block for training: the differentiable fused ops (layer norm, linear with bias or
    /// bias + GELU, causal attention), each one node in the autograd graph with its own backward.
    fn forward_train(&self, x: &Tensor) -> Result<Tensor> {
        let ln = |n: &LayerNorm, x: &Tensor| n.forward_train(x);
        let lin = |l: &Conv1D, x: &Tensor, act| ops::linear_train(x, &l.weight, &l.bias, act);
        let qkv = lin(&self.c_attn, &ln(&self.ln_1, x)?, Activation::Identity)?;
        let attn = ops::causal_attention_train(&qkv, self.n_head)?;
        let x = (x + lin(&self.attn_proj, &attn, Activation::Identity)?)?;
        let m = lin(&self.c_fc, &ln(&self.ln_2, &x)?, Activation::Gelu)?;
        Ok((&x + lin(&self.mlp_proj, &m, Activation::Identity)?)?)
    }

    fn forward(&self, x: &Tensor, masks: &MaskCache, opts: AttentionOptions) -> Result<Tensor> {
        if opts.fused {
            return self.forward_fused(x);
        }
        if opts.differentiable {
            return self.forward_train(x);
        }
        let x = (x + self.attention(&self.ln_1.forward(x)?, masks, opts)?)?;
        let m = self.c_fc.forward(&self.ln_2.forward(&x)?)?.gelu()?; // gelu_new (tanh form)
        Ok((&x + self.mlp_proj.forward(&m)?)?)
    }
}

/// Causal masks (0 on and below the diagonal, -inf above) for query rows `start..start + len`
/// against keys `0..start + len`. On the CPU they are [len, keys] and broadcast; on CUDA they are
/// stored expanded to [b, h, len, keys] so the add is a contiguous one (see `Conv1D::forward`).
/// (batch, heads, sequence length, first query row, query rows); batch and heads are 0 when the
/// mask is broadcast rather than expanded.
type MaskKey = (usize, usize, usize, usize, usize);

#[derive(Debug)]
struct MaskCache {
    masks: Mutex<HashMap<MaskKey, Tensor>>,
    device: Device,
    dtype: DType,
}

impl MaskCache {
    fn new(device: &Device, dtype: DType) -> Self {
        Self {
            masks: Mutex::new(HashMap::new()),
            device: device.clone(),
            dtype,
        }
    }

    fn get(&self, b: usize, h: usize, t: usize, start: usize, len: usize) -> Result<Tensor> {
        let device = &self.device;
        let expand = !device.is_cpu();
        let key = if expand {
            (b, h, t, start, len)
        } else {
            (0, 0, t, start, len)
        };
        let mut masks = self
            .masks
            .lock()
            .map_err(|_| candle_core::Error::Msg("causal-mask cache poisoned".into()))?;
        if let Some(m) = masks.get(&key) {
            return Ok(m.clone());
        }
        let mut mask = causal_mask(start, len, device)?.to_dtype(self.dtype)?;
        if expand {
            mask = mask.broadcast_as((b, h, len, start + len))?.contiguous()?;
        }
        masks.insert(key, mask.clone());
        Ok(mask)
    }
}

/// The additive causal mask of `len` queries from position `start` over the keys 0..start + len:
/// 0 where a query may attend, -inf after it; f32 [len, start + len].
pub fn causal_mask(start: usize, len: usize, device: &Device) -> candle_core::Result<Tensor> {
    let keys = start + len;
    let values: Vec<f32> = (0..len * keys)
        .map(|i| {
            let (row, col) = (start + i / keys, i % keys);
            if col > row {
                f32::NEG_INFINITY
            } else {
                0.0
            }
        })
        .collect();
    Tensor::from_vec(values, (len, keys), device)
}

/// GPT-2 with the residual stream exposed at hook points.
#[derive(Debug)]
pub struct Gpt2 {
    cfg: Gpt2Config,
    wte: Tensor,
    wpe: Tensor,
    blocks: Vec<Block>,
    ln_f: LayerNorm,
    differentiable: bool,
    attention_chunk: Option<usize>,
    fused: bool,
    masks: MaskCache,
}

impl Gpt2 {
    /// Builds the model from a `VarBuilder` with Hugging Face names (`wte.weight`, `h.0.ln_1.weight`, ...).
    /// Backed by a `VarMap`, the weights are trainable variables initialised as GPT-2 does.
    pub fn new(cfg: Gpt2Config, vb: VarBuilder) -> Result<Self> {
        cfg.validate()?;
        let wte = vb.get_with_hints(
            (cfg.vocab_size, cfg.n_embd),
            "wte.weight",
            Init::Randn {
                mean: 0.0,
                stdev: WEIGHT_STD,
            },
        )?;
        let wpe = vb.get_with_hints(
            (cfg.n_positions, cfg.n_embd),
            "wpe.weight",
            Init::Randn {
                mean: 0.0,
                stdev: 0.01,
            },
        )?;
        let blocks = (0..cfg.n_layer)
            .map(|i| Block::new(vb.pp(format!("h.{i}")), &cfg))
            .collect::<Result<Vec<_>>>()?;
        let ln_f = LayerNorm::new(vb.pp("ln_f"), cfg.n_embd, cfg.layer_norm_epsilon)?;
        let differentiable = wte.is_variable();
        let masks = MaskCache::new(wte.device(), wte.dtype());
        Ok(Self {
            cfg,
            wte,
            wpe,
            blocks,
            ln_f,
            differentiable,
            attention_chunk: Some(DEFAULT_ATTENTION_CHUNK),
            fused: true,
            masks,
        })
    }

    /// Query-chunk length of the causal attention (`None`: whole sequences at once). Chunking
    /// gives the same function and skips work above the diagonal; it is not used when training.
    pub fn set_attention_chunk(&mut self, chunk: Option<usize>) {
        self.attention_chunk = chunk.filter(|c| *c > 0);
    }

    /// Whether inference on CUDA uses the fused kernels (the default) or candle's composite ops.
    /// Training always uses the differentiable fused ops (`ops::*_train`).
    pub fn set_fused_kernels(&mut self, fused: bool) {
        self.fused = fused;
    }

    /// Whether a forward pass now runs through the fused kernels.
    pub fn uses_fused_kernels(&self) -> bool {
        self.fused
            && !self.differentiable
            && self.device().is_cuda()
            && self.cfg.n_embd / self.cfg.n_head == ops::FUSED_HEAD_DIM
            && matches!(self.dtype(), DType::F32 | DType::BF16 | DType::F16)
    }

    pub fn config(&self) -> &Gpt2Config {
        &self.cfg
    }

    pub fn d_model(&self) -> usize {
        self.cfg.n_embd
    }

    pub fn dtype(&self) -> DType {
        self.wte.dtype()
    }

    pub fn device(&self) -> &Device {
        self.wte.device()
    }

    /// The token embedding [vocab, d_model]; tied, its transpose is the unembedding.
    pub fn token_embedding(&self) -> &Tensor {
        &self.wte
    }

    /// All weights under their Hugging Face names, in a stable order.
    pub fn named_tensors(&self) -> Vec<(String, Tensor)> {
        let mut out = vec![
            ("wte.weight".to_string(), self.wte.clone()),
            ("wpe.weight".to_string(), self.wpe.clone()),
        ];
        let norm = |out: &mut Vec<(String, Tensor)>, p: &str, n: &LayerNorm| {
            out.push((format!("{p}.weight"), n.weight.clone()));
            out.push((format!("{p}.bias"), n.bias.clone()));
        };
        let lin = |out: &mut Vec<(String, Tensor)>, p: &str, l: &Conv1D| {
            out.push((format!("{p}.weight"), l.weight.clone()));
            out.push((format!("{p}.bias"), l.bias.clone()));
        };
        for (i, b) in self.blocks.iter().enumerate() {
            norm(&mut out, &format!("h.{i}.ln_1"), &b.ln_1);
            lin(&mut out, &format!("h.{i}.attn.c_attn"), &b.c_attn);
            lin(&mut out, &format!("h.{i}.attn.c_proj"), &b.attn_proj);
            norm(&mut out, &format!("h.{i}.ln_2"), &b.ln_2);
            lin(&mut out, &format!("h.{i}.mlp.c_fc"), &b.c_fc);
            lin(&mut out, &format!("h.{i}.mlp.c_proj"), &b.mlp_proj);
        }
        norm(&mut out, "ln_f", &self.ln_f);
        out
    }

    fn embed(&self, tokens: &Tensor) -> Result<Tensor> {
        let (b, t) = tokens.dims2()?;
        if t > self.cfg.n_positions {
            return Err(candle_core::Error::Msg(format!(
                "sequence length {t} exceeds the model's n_positions {}",
                self.cfg.n_positions
            ))
            .into());
        }
        let tok =
            self.wte
                .index_select(&tokens.flatten_all()?, 0)?
                .reshape((b, t, self.cfg.n_embd))?;
        Ok(tok.broadcast_add(&self.wpe.narrow(0, 0, t)?)?)
    }

    /// Runs as few blocks as `hooks` and `want_logits` need; captures hooks in request order and
    /// replaces the stream at each patch's hook point by the patch's output (patches of one hook point
    /// apply in list order).
    fn run(
        &self,
        tokens: &Tensor,
        hooks: &[HookPoint],
        patches: &[(HookPoint, Patch)],
        want_logits: bool,
    ) -> Result<(Vec<Tensor>, Option<Tensor>)> {
        let n_layer = self.cfg.n_layer;
        for h in hooks.iter().chain(patches.iter().map(|(h, _)| h)) {
            h.validate(n_layer)?;
            if !h.is_residual() {
                return Err(Error::HookUnsupported {
                    point: h.to_string(),
                    model: "GPT-2".into(),
                    offered: "blocks.L.hook_resid_pre, blocks.L.hook_resid_post and ln_final"
                        .into(),
                });
            }
        }
        let depth = if want_logits {
            n_layer
        } else {
            hooks
                .iter()
                .map(|h| h.blocks_needed(n_layer))
                .max()
                .unwrap_or(0)
        };
        let mut captured: Vec<Option<Tensor>> = vec![None; hooks.len()];
        let mut visit = |point: HookPoint, x: Tensor| -> Result<Tensor> {
            let mut x = x;
            for (p, f) in patches {
                if *p == point {
                    x = f(&x)?;
                }
            }
            for (slot, h) in captured.iter_mut().zip(hooks) {
                if *h == point {
                    *slot = Some(x.clone());
                }
            }
            Ok(x)
        };
        let mut x = self.embed(tokens)?;
        let opts = AttentionOptions {
            differentiable: self.differentiable,
            chunk: self.attention_chunk,
            fused: self.uses_fused_kernels(),
        };
        for (l, block) in self.blocks.iter().take(depth).enumerate() {
            x = visit(HookPoint::ResidPre(l), x)?;
            x = block.forward(&x, &self.masks, opts)?;
            x = visit(HookPoint::ResidPost(l), x)?;
        }
        if depth < n_layer {
            x = visit(HookPoint::ResidPre(depth), x)?;
        }
        let needs_final = want_logits || hooks.contains(&HookPoint::LnFinal);
        let mut logits = None;
        if needs_final && depth == n_layer {
            let normed = if opts.fused {
                self.ln_f.forward_fused(&x)?
            } else if opts.differentiable {
                self.ln_f.forward_train(&x)?
            } else {
                self.ln_f.forward(&x)?
            };
            let normed = visit(HookPoint::LnFinal, normed)?;
            if want_logits {
                let (b, t, d) = normed.dims3()?;
                let flat = normed.reshape((b * t, d))?.matmul(&self.wte.t()?)?;
                logits = Some(flat.reshape((b, t, self.cfg.vocab_size))?);
            }
        }
        let captured = captured
            .into_iter()
            .zip(hooks)
            .map(|(c, h)| {
                c.ok_or_else(|| Error::HookPoint(format!("{h}: not reached in the forward pass")))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((captured, logits))
    }

    /// The residual stream at each hook point, each [B, T, d_model], in request order. Stops after the
    /// last block that any hook needs.
    pub fn forward_hooks(&self, tokens: &Tensor, hooks: &[HookPoint]) -> Result<Vec<Tensor>> {
        Ok(self.run(tokens, hooks, &[], false)?.0)
    }

    /// Next-token logits [B, T, vocab].
    pub fn forward_logits(&self, tokens: &Tensor) -> Result<Tensor> {
        self.logits_of(self.run(tokens, &[], &[], true)?.1)
    }

    /// Logits with the residual stream at `hook` replaced by `patch(stream)` (e.g. an SAE's
    /// reconstruction, for the cross-entropy-loss-recovered metric).
    pub fn forward_logits_patched(
        &self,
        tokens: &Tensor,
        hook: HookPoint,
        patch: Patch,
    ) -> Result<Tensor> {
        self.forward_logits_patched_many(tokens, &[(hook, patch)])
    }

    /// Logits with the residual stream at every listed hook point replaced by its patch's output, in
    /// one forward (e.g. a crosscoder's reconstruction of each of its layers). A patch sees the stream
    /// as the earlier patches left it; patches of one hook point apply in list order.
    pub fn forward_logits_patched_many(
        &self,
        tokens: &Tensor,
        patches: &[(HookPoint, Patch)],
    ) -> Result<Tensor> {
        self.logits_of(self.run(tokens, &[], patches, true)?.1)
    }

    fn logits_of(&self, logits: Option<Tensor>) -> Result<Tensor> {
        logits.ok_or_else(|| candle_core::Error::Msg("logits were not computed".into()).into())
    }

    /// Mean next-token cross-entropy of `logits` [B, T, V] for `tokens` [B, T] (positions 0..T-1
    /// predict 1..T), computed in f32 by the fused op (one node in the autograd graph).
    pub fn next_token_loss(logits: &Tensor, tokens: &Tensor) -> Result<Tensor> {
        Ok(ops::next_token_cross_entropy(logits, tokens)?)
    }

    /// The model's mean next-token cross-entropy on `tokens` [B, T] (positions 0..T-1 predict 1..T),
    /// differentiable when the weights are: [`Self::next_token_loss`] of [`Self::forward_logits`]. On
    /// the CPU the output head and the loss run over chunks of rows
    /// ([`ops::next_token_cross_entropy_chunked`]), so memory holds one chunk of logits rather than
    /// [B, T, V]; on CUDA the fused loss reads the whole logits.
    pub fn forward_loss(&self, tokens: &Tensor) -> Result<Tensor> {
        self.loss_of(tokens, true)
    }

    /// [`Self::forward_loss`] without a gradient (evaluation of trainable weights): the head computes
    /// the loss only.
    pub fn forward_loss_no_grad(&self, tokens: &Tensor) -> Result<Tensor> {
        self.loss_of(tokens, false)
    }

    fn loss_of(&self, tokens: &Tensor, grad: bool) -> Result<Tensor> {
        let detach = |t: Tensor| if grad { t } else { t.detach() };
        if !self.device().is_cpu() {
            return Self::next_token_loss(&detach(self.forward_logits(tokens)?), tokens);
        }
        let (captured, _) = self.run(tokens, &[HookPoint::LnFinal], &[], false)?;
        let normed = captured
            .into_iter()
            .next()
            .ok_or_else(|| Error::HookPoint("ln_final: not reached in the forward pass".into()))?;
        Ok(ops::next_token_cross_entropy_chunked(
            &detach(normed),
            &detach(self.wte.clone()),
            tokens,
            ops::loss_chunk_rows(self.cfg.vocab_size),
        )?)
    }
}
