//! Causal self-attention on the packed `c_attn` output [B, T, 3 d] (per token: the query heads,
//! then the key heads, then the value heads) -> [B, T, d] in head-major order, as `c_proj` takes
//! it. A candle custom op: one fused kernel on CUDA, a direct loop on the CPU.
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};
use runtime::cuda_fwd;

/// Which CUDA kernel runs the attention (the CPU path is the same for both).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionKernel {
    /// Tensor cores for bf16 and f16; f32 takes the scalar kernel.
    Auto,
    /// One thread per query row with f32 arithmetic, for every dtype.
    Scalar,
}

/// Head size the CUDA kernels are compiled for (every GPT-2 size uses 64).
pub const FUSED_HEAD_DIM: usize = 64;

/// Softmax(q kᵀ / √hd + causal mask) v for each head; `qkv` is [B, T, 3 n_head hd].
pub fn causal_attention(qkv: &Tensor, n_head: usize) -> Result<Tensor> {
    causal_attention_with(qkv, n_head, AttentionKernel::Auto)
}

/// [`causal_attention`] with a choice of CUDA kernel. On CUDA the head size must be
/// [`FUSED_HEAD_DIM`].
pub fn causal_attention_with(
    qkv: &Tensor,
    n_head: usize,
    kernel: AttentionKernel,
) -> Result<Tensor> {
    let (_, _, three_d) = qkv.dims3()?;
    if n_head == 0 || three_d % (3 * n_head) != 0 {
        return Err(candle_core::Error::Msg(format!(
            "causal_attention: last dimension {three_d} is not 3 x {n_head} heads x head size"
        )));
    }
    qkv.apply_op1_no_bwd(&CausalAttention {
        heads: Heads(n_head),
        kernel,
    })
}

pub(super) struct CausalAttention {
    pub heads: Heads,
    /// Read by the CUDA path only; the CPU path is the same for every kernel.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub kernel: AttentionKernel,
}

/// The head count of a packed [B, T, 3 d] input; its other sizes follow from its shape.
#[derive(Debug, Clone, Copy)]
pub(super) struct Heads(pub usize);

impl Heads {
    /// (batch, sequence length, heads, head size) of a [B, T, 3 d] input.
    pub fn of(&self, shape: &Shape) -> Result<(usize, usize, usize, usize)> {
        let (b, t, three_d) = shape.dims3()?;
        Ok((b, t, self.0, three_d / (3 * self.0)))
    }
}

/// The attention of contiguous f32 values [B, T, 3, H, hd] -> [B, T, H, hd].
fn attention_f32(x: &[f32], b: usize, t: usize, h: usize, hd: usize) -> Vec<f32> {
    let d = h * hd;
    let scale = 1.0 / (hd as f32).sqrt();
    let mut out = vec![0f32; b * t * d];
    let mut p = vec![0f32; t];
    for bi in 0..b {
        let row = |ti: usize, part: usize, hi: usize| {
            let at = ((bi * t + ti) * 3 + part) * d + hi * hd;
            &x[at..at + hd]
        };
        for hi in 0..h {
            for i in 0..t {
                let q = row(i, 0, hi);
                let mut max = f32::NEG_INFINITY;
                for (j, pj) in p.iter_mut().enumerate().take(i + 1) {
                    let k = row(j, 1, hi);
                    *pj = q.iter().zip(k).map(|(a, b)| a * b).sum::<f32>() * scale;
                    max = max.max(*pj);
                }
                let mut sum = 0f32;
                for pj in &mut p[..=i] {
                    *pj = (*pj - max).exp();
                    sum += *pj;
                }
                let o = &mut out[(bi * t + i) * d + hi * hd..][..hd];
                for (j, pj) in p[..=i].iter().enumerate() {
                    for (oe, ve) in o.iter_mut().zip(row(j, 2, hi)) {
                        *oe += pj / sum * ve;
                    }
                }
            }
        }
    }
    out
}

impl CustomOp1 for CausalAttention {
    fn name(&self) -> &'static str {
        "causal-attention"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let (b, t, h, hd) = self.heads.of(layout.shape())?;
        let (start, end) = layout.contiguous_offsets().ok_or_else(|| {
            candle_core::Error::Msg("causal_attention: input must be contiguous".into())
        })?;
        let shape = Shape::from((b, t, h * hd));
        let out = match storage {
            CpuStorage::F32(v) => CpuStorage::F32(attention_f32(&v[start..end], b, t, h, hd)),
            CpuStorage::BF16(v) => {
                let x: Vec<f32> = v[start..end].iter().map(|e| e.to_f32()).collect();
                let y = attention_f32(&x, b, t, h, hd);
                CpuStorage::BF16(y.into_iter().map(half::bf16::from_f32).collect())
            }
            CpuStorage::F16(v) => {
                let x: Vec<f32> = v[start..end].iter().map(|e| e.to_f32()).collect();
                let y = attention_f32(&x, b, t, h, hd);
                CpuStorage::F16(y.into_iter().map(half::f16::from_f32).collect())
            }
            _ => {
                return Err(candle_core::Error::Msg(
                    "causal_attention: needs f32, bf16 or f16".into(),
                ))
            }
        };
        Ok((out, shape))
    }

    cuda_fwd!(|op, (storage, layout)| super::cuda::attention::forward(op, storage, layout));
}
