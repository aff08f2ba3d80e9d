//! The pieces the families share: linear maps, norms, rotary embeddings, masks and attention, all
//! candle ops so one code path runs on the CPU and on CUDA.
use candle_core::{DType, Device, Module, Result, Tensor, D};
use candle_nn::VarBuilder;

/// `y = x Wᵀ + b` with `W` stored as [out, in] (`torch.nn.Linear`).
#[derive(Debug, Clone)]
pub struct Linear {
    pub weight: Tensor,
    pub bias: Option<Tensor>,
}

impl Linear {
    pub fn new(vb: VarBuilder, d_in: usize, d_out: usize, bias: bool) -> Result<Self> {
        let weight = vb.get((d_out, d_in), "weight")?;
        let bias = if bias {
            Some(vb.get(d_out, "bias")?)
        } else {
            None
        };
        Ok(Self { weight, bias })
    }
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        // One 2-D GEMM over all tokens rather than a batched one.
        let dims = x.dims();
        let d_in = dims[dims.len() - 1];
        let n = x.elem_count() / d_in;
        let mut y = x.reshape((n, d_in))?.matmul(&self.weight.t()?)?;
        if let Some(b) = &self.bias {
            y = y.broadcast_add(b)?;
        }
        let mut out = dims.to_vec();
        out[dims.len() - 1] = self.weight.dim(0)?;
        y.reshape(out)
    }
}

/// RMSNorm: `x / sqrt(mean(x²) + eps) * w`, with Gemma's `(1 + w)` when `unit_offset`.
#[derive(Debug, Clone)]
pub struct RmsNorm {
    /// The scale applied, `1 + w` already added for Gemma (in f32 before the cast).
    scale: Tensor,
    eps: f32,
}

impl RmsNorm {
    pub fn new(vb: VarBuilder, d: usize, eps: f64, unit_offset: bool) -> Result<Self> {
        let w = vb.get(d, "weight")?;
        let scale = if unit_offset {
            (w.to_dtype(DType::F32)? + 1.0)?.to_dtype(w.dtype())?
        } else {
            w
        };
        Ok(Self {
            scale,
            eps: eps as f32,
        })
    }
}

impl Module for RmsNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        candle_nn::ops::rms_norm(&x.contiguous()?, &self.scale, self.eps)
    }
}

/// LayerNorm with weight and bias (`torch.nn.LayerNorm`).
#[derive(Debug, Clone)]
pub struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f32,
}

impl LayerNorm {
    pub fn new(vb: VarBuilder, d: usize, eps: f64) -> Result<Self> {
        Ok(Self {
            weight: vb.get(d, "weight")?,
            bias: vb.get(d, "bias")?,
            eps: eps as f32,
        })
    }
}

impl Module for LayerNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        candle_nn::ops::layer_norm(&x.contiguous()?, &self.weight, &self.bias, self.eps)
    }
}

/// How the rotary frequencies are rescaled for long contexts (`rope_scaling` / `rope_parameters`).
#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    None,
    /// Frequencies divided by `factor`.
    Linear {
        factor: f64,
    },
    /// Llama 3.1's: low frequencies divided by `factor`, high ones kept, a smooth blend between.
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position_embeddings: f64,
    },
}

/// Rotary position embedding on the first `dim` features of each head (all of them but in
/// GPT-NeoX's partial rotary), in the rotate-half layout.
#[derive(Debug, Clone)]
pub struct Rotary {
    inv_freq: Vec<f32>,
    dim: usize,
}

impl Rotary {
    pub fn new(dim: usize, theta: f64, scaling: &RopeScaling) -> Self {
        // As transformers computes them: in f32 from theta^(2i / dim).
        let base: Vec<f32> = (0..dim / 2)
            .map(|i| 1.0 / (theta as f32).powf((2 * i) as f32 / dim as f32))
            .collect();
        let inv_freq = match *scaling {
            RopeScaling::None => base,
            RopeScaling::Linear { factor } => base.iter().map(|f| f / factor as f32).collect(),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings: old,
            } => {
                let (factor, low, high, old) = (
                    factor as f32,
                    low_freq_factor as f32,
                    high_freq_factor as f32,
                    old as f32,
                );
                let low_wavelen = old / low;
                let high_wavelen = old / high;
                base.iter()
                    .map(|&f| {
                        let wavelen = 2.0 * std::f32::consts::PI / f;
                        let scaled = if wavelen > low_wavelen { f / factor } else { f };
                        if wavelen < high_wavelen || wavelen > low_wavelen {
                            scaled
                        } else {
                            let smooth = (old / wavelen - low) / (high - low);
                            (1.0 - smooth) * scaled / factor + smooth * scaled
                        }
                    })
                    .collect()
            }
        };
        Self { inv_freq, dim }
    }

    /// cos and sin of positions 0..t, each [t, dim / 2], in `dtype`.
    pub fn tables(&self, t: usize, dtype: DType, device: &Device) -> Result<(Tensor, Tensor)> {
        let half = self.inv_freq.len();
        let angles: Vec<f32> = (0..t)
            .flat_map(|p| self.inv_freq.iter().map(move |f| p as f32 * f))
            .collect();
        let angles = Tensor::from_vec(angles, (t, half), device)?;
        Ok((
            angles.cos()?.to_dtype(dtype)?,
            angles.sin()?.to_dtype(dtype)?,
        ))
    }

    /// Rotates `x` [b, heads, t, head_dim] by the tables of [`Self::tables`].
    pub fn apply(&self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        let head_dim = x.dim(D::Minus1)?;
        if self.dim == head_dim {
            return candle_nn::rotary_emb::rope(&x.contiguous()?, cos, sin);
        }
        let rotated =
            candle_nn::rotary_emb::rope(&x.narrow(3, 0, self.dim)?.contiguous()?, cos, sin)?;
        let kept = x.narrow(3, self.dim, head_dim - self.dim)?;
        Tensor::cat(&[&rotated, &kept], 3)
    }
}

/// The additive mask of `t` queries over `t` keys: 0 where query `i` sees key `j` (`j <= i`, and
/// `i - j < window` with a sliding window), -inf elsewhere; [t, t] in `dtype`.
pub fn attention_mask(
    t: usize,
    window: Option<usize>,
    dtype: DType,
    device: &Device,
) -> Result<Tensor> {
    let values: Vec<f32> = (0..t * t)
        .map(|n| {
            let (i, j) = (n / t, n % t);
            let seen = j <= i && window.is_none_or(|w| i - j < w);
            if seen {
                0.0
            } else {
                f32::NEG_INFINITY
            }
        })
        .collect();
    Tensor::from_vec(values, (t, t), device)?.to_dtype(dtype)
}

/// One [`attention_mask`] per distinct window among `windows`.
pub fn window_masks(
    windows: impl IntoIterator<Item = Option<usize>>,
    t: usize,
    dtype: DType,
    device: &Device,
) -> Result<std::collections::HashMap<Option<usize>, Tensor>> {
    let mut masks = std::collections::HashMap::new();
    for w in windows {
        if let std::collections::hash_map::Entry::Vacant(e) = masks.entry(w) {
            e.insert(attention_mask(t, w, dtype, device)?);
        }
    }
    Ok(masks)
}

/// Scaled dot-product attention with grouped key/value heads: `q` [b, h, t, hd], `k` and `v`
/// [b, kv, t, hd] (h a multiple of kv), `mask` [t, t] additive, scores optionally soft-capped
/// (`cap · tanh(s / cap)`, Gemma 2) before the mask. The softmax runs in f32 as transformers'
/// does. Returns [b, t, h · hd].
pub fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: &Tensor,
    scale: f64,
    softcap: Option<f64>,
) -> Result<Tensor> {
    let (b, h, t, hd) = q.dims4()?;
    let kv = k.dim(1)?;
    let rep = h / kv;
    // Each key/value head serves `rep` query heads: fold them into the query rows, so one
    // batched GEMM per kv head reads k and v once.
    let q = q.reshape((b, kv, rep * t, hd))?;
    let mut scores = (q.matmul(&k.t()?)? * scale)?;
    if let Some(cap) = softcap {
        scores = ((scores / cap)?.tanh()? * cap)?;
    }
    let scores = scores
        .reshape((b, kv, rep, t, t))?
        .broadcast_add(mask)?
        .to_dtype(DType::F32)?;
    let probs = candle_nn::ops::softmax_last_dim(&scores)?
        .to_dtype(v.dtype())?
        .reshape((b, kv, rep * t, t))?;
    probs
        .matmul(&v.contiguous()?)?
        .reshape((b, h, t, hd))?
        .transpose(1, 2)?
        .contiguous()?
        .reshape((b, t, h * hd))
}
