//! Next-token cross-entropy of the output head (`logits = hidden · wteᵀ`) on the CPU, computed over
//! chunks of rows so that no [tokens, vocabulary] tensor exists whole.
//!
//! A step of 32 × 256 tokens over GPT-2's 50 257-word vocabulary has 1.6 GB of f32 logits, and the
//! composed path (logits, their gradient, the head's matmul backward) keeps several such tensors
//! alive at once. Here the forward takes `chunk_rows` rows at a time: one GEMM for their logits,
//! log-sum-exp and loss per row, and — when a gradient is wanted — the row turned into
//! `(softmax − onehot) / rows` in place and two more GEMMs adding its share of the hidden states' and
//! the embedding's gradients. The backward only scales those by the upstream gradient. Peak memory
//! is one chunk of logits; the arithmetic is that of the composed path (three GEMMs over the head).
use super::cross_entropy::{exp, log_sum_exp};
use super::saved::Saved;
use candle_core::{CpuStorage, CustomOp3, DType, Layout, Shape, Tensor};
use rayon::prelude::*;
use runtime::cpu_fwd;

/// Logits one chunk holds at most (64 MiB of f32), unless one row is longer.
pub const LOSS_CHUNK_ELEMENTS: usize = 1 << 24;

/// Rows of a chunk for a vocabulary of `vocab` words under [`LOSS_CHUNK_ELEMENTS`].
pub fn loss_chunk_rows(vocab: usize) -> usize {
    (LOSS_CHUNK_ELEMENTS / vocab.max(1)).max(1)
}

/// Mean next-token cross-entropy of the logits `hidden · unembedᵀ` for `tokens` [B, T] (positions
/// 0..T-1 predict 1..T), with `hidden` [B, T, d] and `unembed` [V, d] (GPT-2's tied `wte`), f32 on the
/// CPU; differentiable with respect to both. The logits are computed `chunk_rows` rows at a time
/// and never kept. The same function as `next_token_cross_entropy(hidden · unembedᵀ, tokens)`;
/// an out-of-vocabulary target, or NaN / +∞ in a predicting row, makes the loss NaN.
pub fn next_token_cross_entropy_chunked(
    hidden: &Tensor,
    unembed: &Tensor,
    tokens: &Tensor,
    chunk_rows: usize,
) -> candle_core::Result<Tensor> {
    let (b, t, d) = hidden.dims3()?;
    let shapes_fit = tokens.dims() == [b, t]
        && t >= 2
        && unembed.rank() == 2
        && unembed.dim(1)? == d
        && chunk_rows >= 1;
    if !shapes_fit {
        return Err(candle_core::Error::Msg(format!(
            "chunked next-token loss: hidden {:?}, unembedding {:?}, tokens {:?} and chunk of \
             {chunk_rows} rows: need [B, T, d], [V, d], [B, T] with T ≥ 2 and a chunk of at least 1",
            hidden.dims(),
            unembed.dims(),
            tokens.dims()
        )));
    }
    if !hidden.device().is_cpu() || !unembed.device().is_cpu() {
        return Err(candle_core::Error::Msg(
            "chunked next-token loss: runs on the CPU (CUDA has the fused loss over whole logits)"
                .into(),
        ));
    }
    let op = ChunkedCrossEntropy {
        positions: t,
        chunk_rows,
        with_grad: hidden.track_op() || unembed.track_op(),
        grads: Saved::empty(),
    };
    let f32_contiguous = |x: &Tensor| x.to_dtype(DType::F32)?.contiguous();
    f32_contiguous(&hidden.reshape((b * t, d))?)?.apply_op3(
        &f32_contiguous(unembed)?,
        &tokens.to_dtype(DType::U32)?.contiguous()?,
        op,
    )
}

struct ChunkedCrossEntropy {
    /// T: the rows are the B · T positions, b-major; each sequence's last predicts nothing.
    positions: usize,
    chunk_rows: usize,
    /// Whether the forward also computes the gradients (only when an input tracks them).
    with_grad: bool,
    /// The gradients of the mean loss with respect to the hidden states [B·T, d] and the
    /// unembedding [V, d], computed by the forward for the backward to scale.
    grads: Saved<(Tensor, Tensor)>,
}

/// The contiguous data of a CPU tensor's storage.
fn slice_of<'a, T>(data: &'a [T], layout: &Layout, what: &str) -> candle_core::Result<&'a [T]> {
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(&data[start..end]),
        None => Err(candle_core::Error::Msg(format!(
            "chunked next-token loss: {what} must be contiguous"
        ))),
    }
}

/// A matrix of `rows` × `cols` in a slice, element (i, j) at `data[i · row_stride + j · col_stride]`
/// (row-major: strides (cols, 1); its transpose: the same data with the strides swapped).
#[derive(Clone, Copy)]
struct MatView<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

impl<'a> MatView<'a> {
    fn row_major(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self {
            data,
            rows,
            cols,
            row_stride: cols,
            col_stride: 1,
        }
    }

    fn t(self) -> Self {
        Self {
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
            ..self
        }
    }

    /// Whether every element lies inside `data`.
    fn in_bounds(&self) -> bool {
        self.rows == 0
            || self.cols == 0
            || (self.rows - 1) * self.row_stride + (self.cols - 1) * self.col_stride
                < self.data.len()
    }
}

/// `dst = a · b`, or `dst += a · b` with `accumulate`; `dst` row-major [a.rows, b.cols].
fn gemm_into(dst: &mut [f32], a: MatView, b: MatView, accumulate: bool) -> candle_core::Result<()> {
    if a.cols != b.rows || dst.len() != a.rows * b.cols || !a.in_bounds() || !b.in_bounds() {
        return Err(candle_core::Error::Msg(format!(
            "chunked next-token loss: product of {}×{} and {}×{} into {} elements",
            a.rows,
            a.cols,
            b.rows,
            b.cols,
            dst.len()
        )));
    }
    let threads = candle_core::utils::get_num_threads();
    let parallelism = if threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: the shapes agree and every element the strides reach lies in its slice (checked
    // above); `dst` is borrowed mutably, so it aliases neither operand.
    unsafe {
        gemm::gemm(
            a.rows,
            b.cols,
            a.cols,
            dst.as_mut_ptr(),
            1,
            b.cols as isize,
            accumulate,
            a.data.as_ptr(),
            a.col_stride as isize,
            a.row_stride as isize,
            b.data.as_ptr(),
            b.col_stride as isize,
            b.row_stride as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        )
    };
    Ok(())
}

/// The gradients of the mean loss with respect to the hidden states [n, d] and the unembedding
/// [v, d], row-major.
type HeadGrads = (Vec<f32>, Vec<f32>);

impl ChunkedCrossEntropy {
    /// The mean loss over the predicting rows, and with `with_grad` the gradients of it with
    /// respect to `hidden` [n, d] and `unembed` [v, d].
    fn compute(
        &self,
        hidden: &[f32],
        unembed: &[f32],
        tokens: &[u32],
        (n, d, v): (usize, usize, usize),
    ) -> candle_core::Result<(f32, Option<HeadGrads>)> {
        let t = self.positions;
        let rows = n / t * (t - 1);
        let scale = 1.0 / rows as f32;
        let chunk = self.chunk_rows.min(n);
        let mut logits = vec![0f32; chunk * v];
        let mut grads = self
            .with_grad
            .then(|| (vec![0f32; n * d], vec![0f32; v * d]));
        let w = MatView::row_major(unembed, v, d);
        let mut total = 0f64;
        let mut losses = vec![0f32; chunk];
        for start in (0..n).step_by(chunk) {
            let c = chunk.min(n - start);
            let block = &mut logits[..c * v];
            let h = MatView::row_major(&hidden[start * d..(start + c) * d], c, d);
            gemm_into(block, h, w.t(), false)?;
            block
                .par_chunks_mut(v)
                .zip(losses[..c].par_iter_mut())
                .enumerate()
                .for_each(|(i, (row, loss))| {
                    let at = start + i;
                    if at % t + 1 == t {
                        // The last position predicts nothing.
                        *loss = 0.0;
                        row.fill(0.0);
                        return;
                    }
                    let target = tokens[at + 1] as usize;
                    let lse = log_sum_exp(row);
                    // An out-of-vocabulary target makes the loss NaN, which the trainer reports.
                    *loss = row.get(target).map_or(f32::NAN, |x| lse - x);
                    if self.with_grad {
                        row.iter_mut().for_each(|x| *x = scale * exp(*x - lse));
                        if let Some(g) = row.get_mut(target) {
                            *g -= scale;
                        }
                    }
                });
            // In row order, so the value does not depend on the thread count.
            total += losses[..c].iter().map(|&l| l as f64).sum::<f64>();
            if let Some((grad_hidden, grad_unembed)) = grads.as_mut() {
                let g = MatView::row_major(block, c, v);
                gemm_into(&mut grad_hidden[start * d..(start + c) * d], g, w, false)?;
                gemm_into(grad_unembed, g.t(), h, start > 0)?;
            }
        }
        Ok(((total / rows as f64) as f32, grads))
    }
}

impl CustomOp3 for ChunkedCrossEntropy {
    fn name(&self) -> &'static str {
        "chunked-next-token-cross-entropy"
    }

    cpu_fwd!(|op, (s1, l1), (s2, l2), (s3, l3)| {
        let (n, d) = l1.shape().dims2()?;
        let (v, _) = l2.shape().dims2()?;
        let (CpuStorage::F32(hidden), CpuStorage::F32(unembed), CpuStorage::U32(tokens)) =
            (s1, s2, s3)
        else {
            return Err(candle_core::Error::Msg(
                "chunked next-token loss: needs f32 hidden states and unembedding, u32 tokens"
                    .into(),
            ));
        };
        let hidden = slice_of(hidden, l1, "hidden states")?;
        let unembed = slice_of(unembed, l2, "unembedding")?;
        let tokens = slice_of(tokens, l3, "tokens")?;
        let (mean, grads) = op.compute(hidden, unembed, tokens, (n, d, v))?;
        if let Some((grad_hidden, grad_unembed)) = grads {
            let cpu = &candle_core::Device::Cpu;
            op.grads.keep((
                Tensor::from_vec(grad_hidden, (n, d), cpu)?,
                Tensor::from_vec(grad_unembed, (v, d), cpu)?,
            ));
        }
        Ok((CpuStorage::F32(vec![mean]), Shape::from(())))
    });

    fn bwd(
        &self,
        _hidden: &Tensor,
        _unembed: &Tensor,
        _tokens: &Tensor,
        _loss: &Tensor,
        grad_loss: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (grad_hidden, grad_unembed) = self.grads.get("chunked next-token loss")?;
        let g = grad_loss.to_dtype(DType::F32)?.to_scalar::<f32>()? as f64;
        let (grad_hidden, grad_unembed) = if g == 1.0 {
            (grad_hidden, grad_unembed)
        } else {
            ((grad_hidden * g)?, (grad_unembed * g)?)
        };
        // Returned rather than added into a gradient sink: the embedding's gradient joins it in
        // candle's store, so the sum is the one a plain backward pass forms.
        Ok((Some(grad_hidden), Some(grad_unembed), None))
    }
}
