//! Differentiable causal self-attention on the packed `c_attn` output, for training.
//!
//! The forward keeps the softmax probabilities P [B, H, T, T] for the backward, which is a second
//! custom op reading `qkv`, the output gradient and P and writing d(qkv) in the packed layout. On
//! CUDA both are cuBLAS strided-batched GEMMs (TF32 under candle's reduced-precision flag) around
//! one fused kernel each (causal softmax; dS = P ⊙ (dP − rowsum(dP ⊙ P))); on the CPU both are
//! loops over one (batch, head) pair at a time, in parallel.
use super::attention::Heads;
use super::saved::Saved;
use candle_core::backend::BackendStorage;
use candle_core::op::BackpropOp;
use candle_core::{
    CpuStorage, CustomOp1, CustomOp3, DType, Layout, Result, Shape, Storage, Tensor,
};
use rayon::prelude::*;
use runtime::{cpu_fwd, cuda_fwd};

/// Causal multi-head attention: `qkv` [b, t, 3d] (q, k, v packed as GPT-2's `c_attn` writes them)
/// -> [b, t, d], scores scaled by 1/sqrt(d / n_head); differentiable with respect to `qkv`.
/// f32 only; on CUDA the GEMMs use TF32 when `candle_core::cuda::gemm_reduced_precision_f32()`.
pub fn causal_attention_train(qkv: &Tensor, n_head: usize) -> Result<Tensor> {
    causal_attention_train_with(qkv, n_head, AttentionGemms::PerSequence)
}

/// How the CUDA products over the (sequence, head) blocks reach cuBLAS (the CPU ignores it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AttentionGemms {
    /// One strided-batched GEMM per sequence over its heads. The default: the pointer arrays were
    /// slower per op on the H200 (XL heads, TF32: 1.502 against 0.983 ms forward + backward) and
    /// within noise inside a whole XL step (docs/perf/activations-train.md).
    #[default]
    PerSequence,
    /// One pointer-array batched GEMM over all blocks, the arrays filled by one kernel; taken where
    /// every block is 16-byte aligned, else per sequence.
    PointerArrays,
}

/// [`causal_attention_train`] with the CUDA products issued as `gemms` says.
pub fn causal_attention_train_with(
    qkv: &Tensor,
    n_head: usize,
    gemms: AttentionGemms,
) -> Result<Tensor> {
    let (b, t, three_d) = qkv.dims3().map_err(|_| {
        candle_core::Error::Msg(format!(
            "causal_attention_train: qkv must be [batch, seq, 3 d], got {:?}",
            qkv.dims()
        ))
    })?;
    if n_head == 0 || three_d == 0 || three_d % (3 * n_head) != 0 {
        return Err(candle_core::Error::Msg(format!(
            "causal_attention_train: last dimension {three_d} is not 3 x {n_head} heads x head size"
        )));
    }
    // CUDA cannot allocate empty buffers: refuse empty inputs on every device alike.
    if b == 0 || t == 0 {
        return Err(candle_core::Error::Msg(format!(
            "causal_attention_train: empty input {:?}",
            qkv.dims()
        )));
    }
    if qkv.dtype() != DType::F32 {
        return Err(candle_core::Error::Msg(format!(
            "causal_attention_train: needs f32, got {:?}",
            qkv.dtype()
        )));
    }
    qkv.contiguous()?.apply_op1(CausalAttentionTrain {
        dims: Dims {
            heads: Heads(n_head),
            gemms,
        },
        probs: Saved::empty(),
    })
}

/// Heads of the packed input (everything else follows from its shape) and the CUDA batching.
#[derive(Debug, Clone, Copy)]
pub(super) struct Dims {
    pub heads: Heads,
    /// Read by the CUDA products only.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub gemms: AttentionGemms,
}

fn contiguous<'a>(v: &'a [f32], layout: &Layout, what: &str) -> Result<&'a [f32]> {
    let (start, end) = layout.contiguous_offsets().ok_or_else(|| {
        candle_core::Error::Msg(format!("causal_attention_train: {what} must be contiguous"))
    })?;
    Ok(&v[start..end])
}

fn f32_slice<'a>(s: &'a CpuStorage, layout: &Layout, what: &str) -> Result<&'a [f32]> {
    match s {
        CpuStorage::F32(v) => contiguous(v, layout, what),
        other => Err(candle_core::Error::Msg(format!(
            "causal_attention_train: {what} must be f32, got {:?}",
            other.dtype()
        ))),
    }
}

struct CausalAttentionTrain {
    dims: Dims,
    /// Softmax probabilities [B, H, T, T] of the last forward (zero above the diagonal).
    probs: Saved<Tensor>,
}

impl CausalAttentionTrain {
    fn keep(&self, probs: Storage, shape: Shape) {
        let p = Tensor::from_storage(probs, shape, BackpropOp::none(), false);
        self.probs.keep(p);
    }
}

impl CustomOp1 for CausalAttentionTrain {
    fn name(&self) -> &'static str {
        "causal-attention-train"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let (b, t, h, hd) = self.dims.heads.of(layout.shape())?;
        let x = f32_slice(storage, layout, "qkv")?;
        let (out, probs) = forward_f32(x, b, t, h, hd);
        self.keep(
            Storage::Cpu(CpuStorage::F32(probs)),
            Shape::from((b, h, t, t)),
        );
        Ok((CpuStorage::F32(out), Shape::from((b, t, h * hd))))
    }

    cuda_fwd!(|op, (storage, layout)| {
        let (b, t, h, _) = op.dims.heads.of(layout.shape())?;
        let (out, probs, shape) = super::cuda::attention_train::forward(op.dims, storage, layout)?;
        op.keep(Storage::Cuda(probs), Shape::from((b, h, t, t)));
        Ok((out, shape))
    });

    fn bwd(&self, arg: &Tensor, _res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        let probs = self.probs.get("causal_attention_train")?;
        let grad = grad_res.contiguous()?;
        let d_qkv =
            arg.apply_op3_no_bwd(&grad, &probs, &CausalAttentionBackward { dims: self.dims })?;
        Ok(Some(d_qkv))
    }
}

/// d(qkv) from qkv, d(out) and P.
struct CausalAttentionBackward {
    dims: Dims,
}

impl CustomOp3 for CausalAttentionBackward {
    fn name(&self) -> &'static str {
        "causal-attention-train-backward"
    }

    cpu_fwd!(|op, (s_qkv, l_qkv), (s_grad, l_grad), (s_probs, l_probs)| {
        let (b, t, h, hd) = op.dims.heads.of(l_qkv.shape())?;
        let x = f32_slice(s_qkv, l_qkv, "qkv")?;
        let dy = f32_slice(s_grad, l_grad, "output gradient")?;
        let p = f32_slice(s_probs, l_probs, "probabilities")?;
        let dx = backward_f32(x, dy, p, b, t, h, hd);
        Ok((CpuStorage::F32(dx), l_qkv.shape().clone()))
    });

    cuda_fwd!(|op, (s_qkv, l_qkv), (s_grad, l_grad), (s_probs, l_probs)| {
        super::cuda::attention_train::backward(
            op.dims, s_qkv, l_qkv, s_grad, l_grad, s_probs, l_probs,
        )
    });
}

/// Dot product with eight independent sums, so that the compiler vectorizes it.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `y += a * x`.
fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    for (ye, xe) in y.iter_mut().zip(x) {
        *ye += a * xe;
    }
}

/// Rows of one head of one part (0: q, 1: k, 2: v) of the packed [B, T, 3, H, hd] input, copied
/// into a contiguous [T, hd] block.
fn gather(x: &[f32], bi: usize, part: usize, hi: usize, t: usize, h: usize, hd: usize) -> Vec<f32> {
    let d = h * hd;
    let mut out = Vec::with_capacity(t * hd);
    for ti in 0..t {
        let at = ((bi * t + ti) * 3 + part) * d + hi * hd;
        out.extend_from_slice(&x[at..at + hd]);
    }
    out
}

/// (out [B, T, H, hd], P [B, H, T, T]) of contiguous f32 [B, T, 3, H, hd].
fn forward_f32(x: &[f32], b: usize, t: usize, h: usize, hd: usize) -> (Vec<f32>, Vec<f32>) {
    let d = h * hd;
    let scale = 1.0 / (hd as f32).sqrt();
    let heads: Vec<(Vec<f32>, Vec<f32>)> = (0..b * h)
        .into_par_iter()
        .map(|bh| {
            let (bi, hi) = (bh / h, bh % h);
            let [q, k, v] = [0, 1, 2].map(|part| gather(x, bi, part, hi, t, h, hd));
            let mut p = vec![0f32; t * t];
            let mut o = vec![0f32; t * hd];
            for i in 0..t {
                let qi = &q[i * hd..][..hd];
                let row = &mut p[i * t..][..=i];
                let mut max = f32::NEG_INFINITY;
                for (j, pj) in row.iter_mut().enumerate() {
                    *pj = dot(qi, &k[j * hd..][..hd]) * scale;
                    max = max.max(*pj);
                }
                let mut sum = 0f32;
                for pj in row.iter_mut() {
                    *pj = (*pj - max).exp();
                    sum += *pj;
                }
                let inv = 1.0 / sum;
                let oi = &mut o[i * hd..][..hd];
                for (j, pj) in row.iter_mut().enumerate() {
                    *pj *= inv;
                    axpy(oi, *pj, &v[j * hd..][..hd]);
                }
            }
            (o, p)
        })
        .collect();
    let mut out = vec![0f32; b * t * d];
    let mut probs = Vec::with_capacity(b * h * t * t);
    for (bh, (o, p)) in heads.into_iter().enumerate() {
        let (bi, hi) = (bh / h, bh % h);
        for ti in 0..t {
            out[(bi * t + ti) * d + hi * hd..][..hd].copy_from_slice(&o[ti * hd..][..hd]);
        }
        probs.extend_from_slice(&p);
    }
    (out, probs)
}

/// d(qkv) [B, T, 3, H, hd] of contiguous f32 qkv, d(out) [B, T, H, hd] and P [B, H, T, T].
fn backward_f32(
    x: &[f32],
    dy: &[f32],
    probs: &[f32],
    b: usize,
    t: usize,
    h: usize,
    hd: usize,
) -> Vec<f32> {
    let d = h * hd;
    let scale = 1.0 / (hd as f32).sqrt();
    let heads: Vec<[Vec<f32>; 3]> = (0..b * h)
        .into_par_iter()
        .map(|bh| {
            let (bi, hi) = (bh / h, bh % h);
            let [q, k, v] = [0, 1, 2].map(|part| gather(x, bi, part, hi, t, h, hd));
            let mut d_o = Vec::with_capacity(t * hd);
            for ti in 0..t {
                d_o.extend_from_slice(&dy[(bi * t + ti) * d + hi * hd..][..hd]);
            }
            let p = &probs[bh * t * t..][..t * t];
            let (mut dq, mut dk, mut dv) =
                (vec![0f32; t * hd], vec![0f32; t * hd], vec![0f32; t * hd]);
            let mut ds = vec![0f32; t];
            for i in 0..t {
                let pi = &p[i * t..][..=i];
                let doi = &d_o[i * hd..][..hd];
                let mut rowsum = 0f32;
                for (j, (dsj, pj)) in ds.iter_mut().zip(pi).enumerate() {
                    *dsj = dot(doi, &v[j * hd..][..hd]);
                    rowsum += *dsj * pj;
                }
                let qi = &q[i * hd..][..hd];
                let dqi = &mut dq[i * hd..][..hd];
                for (j, (dsj, pj)) in ds.iter_mut().zip(pi).enumerate() {
                    *dsj = pj * (*dsj - rowsum) * scale;
                    axpy(dqi, *dsj, &k[j * hd..][..hd]);
                    axpy(&mut dk[j * hd..][..hd], *dsj, qi);
                    axpy(&mut dv[j * hd..][..hd], *pj, doi);
                }
            }
            [dq, dk, dv]
        })
        .collect();
    let mut dx = vec![0f32; b * t * 3 * d];
    for (bh, parts) in heads.iter().enumerate() {
        let (bi, hi) = (bh / h, bh % h);
        for (part, g) in parts.iter().enumerate() {
            for ti in 0..t {
                dx[((bi * t + ti) * 3 + part) * d + hi * hd..][..hd]
                    .copy_from_slice(&g[ti * hd..][..hd]);
            }
        }
    }
    dx
}
