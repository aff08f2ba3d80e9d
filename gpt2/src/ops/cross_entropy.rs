//! Next-token cross-entropy as one fused op with its own backward pass.
//!
//! Composed from candle ops, the loss over [tokens, 50 257] logits is a chain of log-softmax,
//! gather and mean whose backward allocates and streams several logits-sized tensors. Here the
//! forward reads each row once or twice and keeps the per-row log-sum-exp; the backward writes
//! `(softmax − onehot) · g / rows` in one pass. On the CPU rows are spread over the rayon pool; on
//! CUDA it is three kernels (`kernels/cross_entropy.cu`) with fixed-order sums.
use super::saved::Saved;
use candle_core::{CpuStorage, CustomOp2, DType, Layout, Shape, Tensor};
use rayon::prelude::*;
use runtime::{cpu_fwd, cuda_fwd};

/// Mean next-token cross-entropy of `logits` [B, T, V] for `tokens` [B, T] (positions 0..T-1
/// predict 1..T), differentiable with respect to `logits`; computed in f32 whatever the logits'
/// dtype. An out-of-vocabulary target, or NaN / +∞ in a predicting row, makes the loss NaN.
pub fn next_token_cross_entropy(logits: &Tensor, tokens: &Tensor) -> candle_core::Result<Tensor> {
    let (b, t, _) = logits.dims3()?;
    if tokens.dims() != [b, t] || t < 2 {
        return Err(candle_core::Error::Msg(format!(
            "next-token loss: logits {:?} and tokens {:?} need shapes [B, T, V] and [B, T] with T ≥ 2",
            logits.dims(),
            tokens.dims()
        )));
    }
    logits.to_dtype(DType::F32)?.contiguous()?.apply_op2(
        &tokens.to_dtype(DType::U32)?.contiguous()?,
        NextTokenCrossEntropy {
            log_sum_exp: Saved::empty(),
        },
    )
}

struct NextTokenCrossEntropy {
    /// Log-sum-exp of each predicting row, b-major (B · (T − 1) values), saved for the backward.
    log_sum_exp: Saved<Tensor>,
}

/// The contiguous data of a CPU tensor's storage.
fn slice_of<'a, T>(data: &'a [T], layout: &Layout, what: &str) -> candle_core::Result<&'a [T]> {
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(&data[start..end]),
        None => Err(candle_core::Error::Msg(format!(
            "next-token loss: {what} must be contiguous"
        ))),
    }
}

impl CustomOp2 for NextTokenCrossEntropy {
    fn name(&self) -> &'static str {
        "next-token-cross-entropy"
    }

    cpu_fwd!(|op, (s1, l1), (s2, l2)| {
        let (b, t, v) = l1.shape().dims3()?;
        let (CpuStorage::F32(logits), CpuStorage::U32(tokens)) = (s1, s2) else {
            return Err(candle_core::Error::Msg(
                "next-token loss: needs f32 logits and u32 tokens".into(),
            ));
        };
        let logits = slice_of(logits, l1, "logits")?;
        let tokens = slice_of(tokens, l2, "tokens")?;
        let rows = b * (t - 1);
        let per_row: Vec<(f32, f32)> = (0..rows)
            .into_par_iter()
            .map(|r| {
                let (seq, pos) = (r / (t - 1), r % (t - 1));
                let row = &logits[(seq * t + pos) * v..][..v];
                let target = tokens[seq * t + pos + 1] as usize;
                let lse = log_sum_exp(row);
                // An out-of-vocabulary target makes the loss NaN, which the trainer reports.
                let loss = row.get(target).map_or(f32::NAN, |x| lse - x);
                (lse, loss)
            })
            .collect();
        let total: f64 = per_row.iter().map(|&(_, l)| l as f64).sum();
        let lse: Vec<f32> = per_row.iter().map(|&(s, _)| s).collect();
        op.log_sum_exp
            .keep(Tensor::from_vec(lse, rows, &candle_core::Device::Cpu)?);
        let mean = (total / rows as f64) as f32;
        Ok((CpuStorage::F32(vec![mean]), Shape::from(())))
    });

    cuda_fwd!(|op, (s1, l1), (s2, l2)| {
        let (mean, lse) = super::cuda::cross_entropy::forward(s1, l1, s2, l2)?;
        op.log_sum_exp.keep(lse);
        Ok((mean, Shape::from(())))
    });

    fn bwd(
        &self,
        logits: &Tensor,
        tokens: &Tensor,
        _loss: &Tensor,
        grad_loss: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let lse = self.log_sum_exp.get("next-token loss")?;
        #[cfg(feature = "cuda")]
        if logits.device().is_cuda() {
            let grad = super::cuda::cross_entropy::grad(
                logits,
                tokens,
                &lse,
                &grad_loss.to_dtype(DType::F32)?,
            )?;
            return Ok((Some(grad), None));
        }
        let grad = cpu_grad(logits, tokens, &lse.to_vec1::<f32>()?, grad_loss)?;
        Ok((Some(grad), None))
    }
}

/// `(softmax − onehot) · g / rows` on the CPU, zeros for each sequence's last position.
fn cpu_grad(
    logits: &Tensor,
    tokens: &Tensor,
    lse: &[f32],
    grad_loss: &Tensor,
) -> candle_core::Result<Tensor> {
    let (b, t, v) = logits.dims3()?;
    let rows = b * (t - 1);
    let scale = grad_loss.to_dtype(DType::F32)?.to_scalar::<f32>()? / rows as f32;
    let (storage, layout) = logits.storage_and_layout();
    let candle_core::Storage::Cpu(CpuStorage::F32(data)) = &*storage else {
        return Err(candle_core::Error::Msg(
            "next-token loss: backward needs f32 CPU logits".into(),
        ));
    };
    let x = slice_of(data, layout, "logits")?;
    let tokens = tokens.flatten_all()?.to_vec1::<u32>()?;
    if lse.len() != rows {
        return Err(candle_core::Error::Msg(
            "next-token loss: backward without its forward".into(),
        ));
    }
    // Every element is written below, so the buffer is not zeroed first (51 MB at 256 × 50 257).
    let mut grad: Vec<f32> = Vec::with_capacity(b * t * v);
    grad.spare_capacity_mut()
        .par_chunks_mut(v)
        .enumerate()
        .for_each(|(i, out)| {
            let (seq, pos) = (i / t, i % t);
            if pos + 1 == t {
                // The last position predicts nothing.
                out.iter_mut().for_each(|o| {
                    o.write(0.0);
                });
                return;
            }
            let r = seq * (t - 1) + pos;
            let row = &x[i * v..][..v];
            let m = lse[r];
            for (o, &xi) in out.iter_mut().zip(row) {
                o.write(scale * exp(xi - m));
            }
            let target = tokens[seq * t + pos + 1] as usize;
            if let Some(o) = out.get_mut(target) {
                // SAFETY: written in the loop above.
                let g = unsafe { o.assume_init_mut() };
                *g -= scale;
            }
        });
    // SAFETY: the chunks cover the whole capacity and every element was written.
    unsafe { grad.set_len(b * t * v) };
    drop(storage);
    Tensor::from_vec(grad, (b, t, v), logits.device())
}

/// Lanes of the partial maxima and sums (wide enough for the compiler to vectorize).
const LANES: usize = 16;

/// `ln Σ exp(x)`, stable: max first, then the sum of `exp(x − max)`. NaN or +∞ in `x` gives NaN.
pub(super) fn log_sum_exp(x: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for (m, &v) in lanes.iter_mut().zip(c) {
            *m = if v > *m { v } else { *m };
        }
    }
    let mut max = tail.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    max = lanes.iter().fold(max, |m, &v| m.max(v));
    let mut sums = [0f32; LANES];
    let chunks = x.chunks_exact(LANES);
    for c in chunks {
        for (s, &v) in sums.iter_mut().zip(c) {
            *s += exp(v - max);
        }
    }
    let sum: f64 = sums.iter().map(|&s| s as f64).sum::<f64>()
        + tail.iter().map(|&v| exp(v - max) as f64).sum::<f64>();
    max + sum.ln() as f32
}

/// `exp(x)` for `x ≤ 0` (to ~2 ulp; inputs below −87 flush towards 0; NaN stays NaN), written
/// so the compiler vectorizes it: `2ⁿ · p(r)` with `x = n ln 2 + r`, |r| ≤ ln 2 / 2, and Cephes'
/// polynomial for `p`.
#[inline(always)]
pub(super) fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding and subtracting 1.5 · 2²³ rounds to the nearest integer.
    const ROUND: f32 = 12_582_912.0;
    let x = if x < -87.0 { -87.0 } else { x };
    let n = (x * LOG2E + ROUND) - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4_f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    let scale = f32::from_bits(((n as i32 + 127) << 23) as u32);
    y * scale
}

#[cfg(test)]
mod tests {
    use super::exp;

    #[test]
    fn exp_matches_std_over_its_range() {
        let mut worst = 0f64;
        for i in 0..=870_000 {
            let x = -(i as f32) * 1e-4;
            let want = (x as f64).exp();
            let rel = ((exp(x) as f64 - want) / want).abs();
            worst = worst.max(rel);
        }
        assert!(worst < 3e-7, "worst relative error {worst}");
        assert!(exp(f32::NAN).is_nan());
        assert!(exp(-1e30) < 1e-37);
        assert_eq!(exp(0.0), 1.0);
    }
}
