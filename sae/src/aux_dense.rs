//! The aux-k loss over the dead columns only. With k_aux = d/2 the aux selection holds B·k_aux pairs
//! (25× the main ones at d = 1600, k = 32), and every sparse pass over them reads one W row per pair;
//! here the dead columns D of the (detached) scores are compacted to [B, |D|], each row keeps its
//! min(k_aux, |D|) largest, and the decode and every gradient are dense matmuls over D: cost ∝ B·|D|·d,
//! whatever k_aux — nearly free when few latents are dead.
//!
//! The aux activations are the scores themselves (the f32 / TF32 / bf16 encoder matmul that the selection
//! ran on) rather than a recomputation at the pairs; the matmuls run in the scores' dtype, and the weight
//! gradients go to the same sinks as the sparse path's, reduced in place in a fixed order (no atomics).
use crate::model::{Sae, WeightSinks};
use crate::select::select_indices;
use crate::Result;
use candle_core::{CustomOp2, DType, Tensor};
use runtime::{cpu_fwd, cuda_fwd};

/// Whether the dense form is the cheaper: the sparse form makes six passes over B·keep rows of d f32
/// (values, decode, gradient of the values, input gradient, two weight gradients), the dense one five
/// matmuls of 2·B·|D|·d flops; `flops_per_byte` is the device's matmul rate over its memory bandwidth.
pub fn prefer_dense(
    batch: usize,
    keep: usize,
    n_dead: usize,
    d: usize,
    flops_per_byte: f64,
) -> bool {
    let pair_bytes = 6.0 * 4.0 * (batch * keep * d) as f64;
    let dense_flops = 5.0 * 2.0 * (batch * n_dead * d) as f64;
    dense_flops / flops_per_byte <= pair_bytes
}

/// Matmul rate over memory bandwidth of the step's device and precision (H200: ~495 TFLOP/s TF32 or bf16,
/// ~67 TFLOP/s f32, 4.8 TB/s; on the CPU, measured: ~30 GFLOP/s matmuls against ~0.4 GB/s of pair passes).
pub fn flops_per_byte(sae: &Sae) -> f64 {
    if sae.device().is_cpu() {
        return 64.0;
    }
    #[cfg(feature = "cuda")]
    if candle_core::cuda::gemm_reduced_precision_f32() {
        return 100.0;
    }
    if sae.bf16_scores {
        100.0
    } else {
        14.0
    }
}

/// The normalized aux-k loss `Σ_b ‖e_b − A_b·W_dec[D]‖² / (B·spread)` of the dead latents, A [B, |D|]
/// the `keep` largest scores of each row among the dead columns (zeros elsewhere), `residual` e [B, d]
/// the detached error of the main reconstruction, `spread` its normalizer, `xc = x − b_dec` the centered
/// input. The loss and its gradient wrt the aux reconstruction are formed here, in two passes over
/// [B, d] (residual in place, sum of squares) instead of candle's chain of elementwise ops and their
/// backward; b_dec's and b_enc's gradients come through candle's autograd, W_enc's and W_dec's go to
/// `sinks`.
#[allow(clippy::too_many_arguments)] // the step's tensors and the selector, each used once
pub fn dead_columns_loss(
    sae: &Sae,
    sinks: &WeightSinks,
    xc: &Tensor,
    scores: &Tensor,
    (residual, spread): (&Tensor, f64),
    (mask, n_dead): (&Tensor, usize),
    keep: usize,
    (selector, seed): (profk::Selector, u64),
) -> Result<Tensor> {
    let n = sae.shape.n;
    // The dead columns, padded to an aligned width (the padding repeats the first: its W rows are read,
    // its scores zeroed); all columns when every latent is dead.
    let padded = if n_dead < n {
        Some(dead_columns(mask, n_dead)?)
    } else {
        None
    };
    let acts = dead_column_acts(
        scores,
        padded.as_ref(),
        n_dead,
        keep,
        AuxSelect::Fused,
        (selector, seed),
    )?;
    let dtype = acts.dtype();
    let pick = |w: &Tensor| -> Result<Tensor> { dead_rows(&w.detach(), padded.as_ref(), dtype) };
    let w_dec_d = pick(sae.w_dec.as_tensor())?;
    let w_enc_d = pick(sae.w_enc.as_tensor())?;
    let recon = acts.matmul(&w_dec_d)?.to_dtype(DType::F32)?;
    let err = residual_of(recon, residual)?;
    let scale = 1.0 / (err.dim(0)? as f64 * spread);
    let loss = (sum_sq(&err)? * scale)?;
    let grads = DeadColumnsGrad {
        xc: xc.detach(),
        err,
        scale,
        acts,
        w_enc_d,
        w_dec_d,
        cols: padded.map(|c| c.narrow(0, 0, n_dead)).transpose()?,
        n_dead,
        n,
        sinks: sinks.clone(),
    };
    let tap = sae
        .b_dec
        .as_tensor()
        .apply_op2(sae.b_enc.as_tensor(), grads)?;
    Ok((tap + loss)?)
}

/// How the aux activations are selected on CUDA: `Fused`, one kernel per batch that gathers each row's
/// dead columns into shared memory, selects its `keep` largest by a radix select and writes the row of A
/// (rows up to `cuda::AUX_ROW_MAX` columns; wider ones, e.g. every latent dead, take the other route);
/// `Profk`, the gather, profk's row-wise selection and a scatter. The CPU computes the same function by
/// the second route. The step takes `Fused` (with 5 % dead at (2^16, 4096), TF32, aux-k costs +1.0 ms
/// over aux off on the H200, against +2.3 ms by the `Profk` route: docs/perf/sae.md); the tests
/// compare both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuxSelect {
    Fused,
    Profk,
}

/// The aux activations A [B, w]: the scores [B, n] at the columns `cols` (u32 [w]: the first `n_dead`
/// the dead latents, the rest alignment padding that scores 0; None: every column, n_dead = n), each
/// row's `keep` largest kept — ties to the lowest position, as a full sort by (value descending, index
/// ascending) — and zeros elsewhere; all of them when `keep ≥ n_dead`. The step's scores are ReLU
/// outputs, so the padding's zeros never outrank a dead latent's score.
pub fn dead_column_acts(
    scores: &Tensor,
    cols: Option<&Tensor>,
    n_dead: usize,
    keep: usize,
    how: AuxSelect,
    (selector, seed): (profk::Selector, u64),
) -> Result<Tensor> {
    let width = match cols {
        Some(c) => c.dim(0)?,
        None => scores.dim(1)?,
    };
    if keep == 0 {
        return Ok(Tensor::zeros(
            (scores.dim(0)?, width),
            scores.dtype(),
            scores.device(),
        )?);
    }
    if how == AuxSelect::Fused && keep < n_dead {
        if let Some(acts) = fused_acts(scores, cols, n_dead, width, keep)? {
            return Ok(acts);
        }
    }
    let scores_d = match cols {
        Some(c) => zero_tail_columns(scores.index_select(c, 1)?.contiguous()?, n_dead)?,
        None => scores.contiguous()?,
    };
    if keep >= n_dead {
        return Ok(scores_d);
    }
    let top = select_indices(&scores_d, keep, profk::Mode::Rowwise, selector, seed)?;
    scatter(&scores_d, &top)
}

/// The fused selection kernel's A, where it applies (a CUDA tensor, rows that fit its shared memory).
#[cfg_attr(not(feature = "cuda"), allow(unused_variables))]
fn fused_acts(
    scores: &Tensor,
    cols: Option<&Tensor>,
    n_dead: usize,
    width: usize,
    keep: usize,
) -> Result<Option<Tensor>> {
    #[cfg(feature = "cuda")]
    if scores.device().is_cuda() && width <= crate::cuda::AUX_ROW_MAX {
        return Ok(Some(crate::cuda::aux_topk_rows(
            scores, cols, n_dead, width, keep,
        )?));
    }
    Ok(None)
}

/// The rows `cols` of `w [n, d]` (all rows when None) in `dtype`, contiguous: one gather-and-cast pass
/// on CUDA.
fn dead_rows(w: &Tensor, cols: Option<&Tensor>, dtype: DType) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if let (Some(c), true) = (cols, w.device().is_cuda()) {
        return Ok(crate::cuda::gather_rows(&w.contiguous()?, c, dtype)?);
    }
    let w = match cols {
        Some(c) => w.index_select(c, 0)?,
        None => w.clone(),
    };
    Ok(w.to_dtype(dtype)?.contiguous()?)
}

/// `leftᵀ · right` for `left [B, w]` and `right [B, d]`: a weight gradient, reduced over the batch, which
/// is the outer dimension of both operands as stored. cuBLAS's TF32 tensor-core kernels want one operand
/// with the reduction innermost; with neither, it takes a kernel about 1.7× slower (H200, B = 8192,
/// w = 6560, d = 1600: 0.78 against 0.45 ms). On CUDA `right` is therefore transposed first (B·d
/// elements, a few percent of the product's time) and read as a transposed view.
fn batch_reduce(left: &Tensor, right: &Tensor) -> candle_core::Result<Tensor> {
    #[cfg(feature = "cuda")]
    if right.device().is_cuda() {
        let right_t = crate::cuda::transpose(&right.contiguous()?)?;
        return left.t()?.matmul(&right_t.t()?);
    }
    left.t()?.matmul(right)
}

/// `residual − recon`, in place of `recon` (a fresh f32 tensor) on CUDA.
fn residual_of(recon: Tensor, residual: &Tensor) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if recon.device().is_cuda() {
        let residual = residual.to_dtype(DType::F32)?.contiguous()?;
        let recon = recon.contiguous()?;
        crate::cuda::sub_from_inplace(&recon, &residual)?;
        return Ok(recon);
    }
    Ok((residual - recon)?)
}

/// Σ x² of an f32 tensor as an f32 scalar on its device (a fixed-order reduction on CUDA, read by no
/// one before the step's end; f64 on the CPU).
fn sum_sq(x: &Tensor) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if x.device().is_cuda() {
        return Ok(crate::cuda::sum_sq_scalar(&x.contiguous()?)?);
    }
    Ok(x.to_dtype(DType::F64)?
        .sqr()?
        .sum_all()?
        .to_dtype(DType::F32)?)
}

/// `s · by · x` (x f32, `by` a scalar tensor of x's device, 1 when None) in `dtype`, in one pass on CUDA
/// that reads `by` there (no wait for the device; candle's cast and affine kernels are two slow passes).
fn scale_to(x: &Tensor, s: f64, by: Option<&Tensor>, dtype: DType) -> candle_core::Result<Tensor> {
    #[cfg(feature = "cuda")]
    if x.device().is_cuda() {
        let by = by
            .map(|b| b.to_dtype(DType::F32)?.contiguous())
            .transpose()?;
        return crate::cuda::scale_to(&x.contiguous()?, s as f32, by.as_ref(), dtype);
    }
    let by = match by {
        Some(b) => b.to_dtype(DType::F64)?.to_scalar::<f64>()?,
        None => 1.0,
    };
    (x * (s * by))?.to_dtype(dtype)
}

/// Width of the compacted [B, |D|] matrices: a multiple of 16 columns, so that every row starts 64-byte
/// aligned (f32) and cuBLAS can take its tensor-core kernels (Hopper's need 16-byte aligned strides;
/// |D| = 3277 gives 4-byte ones).
const ALIGN_COLS: usize = 16;

/// The dead latents (u32, ascending) of a u8 mask [n] holding `n_dead` of them, padded to a multiple of
/// [`ALIGN_COLS`] with the first one; compacted on the device on CUDA (no copy of the mask to the host).
pub fn dead_columns(mask: &Tensor, n_dead: usize) -> Result<Tensor> {
    let width = n_dead.next_multiple_of(ALIGN_COLS);
    #[cfg(feature = "cuda")]
    if mask.device().is_cuda() && n_dead > 0 {
        return Ok(crate::cuda::dead_columns(
            &mask.to_dtype(DType::U8)?.contiguous()?,
            width,
        )?);
    }
    let host: Vec<u8> = mask.to_dtype(DType::U8)?.to_vec1()?;
    let mut cols: Vec<u32> = (0..host.len() as u32)
        .filter(|&j| host[j as usize] != 0)
        .collect();
    if cols.len() != n_dead {
        return Err(crate::Error::Shape(format!(
            "dead mask holds {} latents, expected {n_dead}",
            cols.len()
        )));
    }
    let first = cols.first().copied().unwrap_or(0);
    cols.resize(width, first);
    Ok(Tensor::from_vec(cols, width, mask.device())?)
}

/// `t [B, w]` with its columns from `from` on set to zero (in place on CUDA).
fn zero_tail_columns(t: Tensor, from: usize) -> Result<Tensor> {
    let (_, w) = t.dims2()?;
    if from >= w {
        return Ok(t);
    }
    #[cfg(feature = "cuda")]
    if t.device().is_cuda() {
        crate::cuda::zero_tail_columns_inplace(&t, from)?;
        return Ok(t);
    }
    Ok(t.narrow(1, 0, from)?.pad_with_zeros(1, 0, w - from)?)
}

/// Zeros the shape of `src` [B, m] except at the columns `cols [B, keep]` (i64) of each row, which keep
/// `src`'s values.
fn scatter(src: &Tensor, cols: &Tensor) -> Result<Tensor> {
    let cols = cols.to_dtype(DType::I64)?.contiguous()?;
    #[cfg(feature = "cuda")]
    if src.device().is_cuda() {
        let out = Tensor::zeros(src.shape(), src.dtype(), src.device())?;
        crate::cuda::scatter_rows(src, &cols, &out)?;
        return Ok(out);
    }
    let (b, m) = src.dims2()?;
    let offsets = Tensor::arange(0i64, b as i64, src.device())?
        .affine(m as f64, 0.0)?
        .unsqueeze(1)?;
    let idx = cols.broadcast_add(&offsets)?.flatten_all()?;
    let flat = src.flatten_all()?;
    let vals = flat.index_select(&idx, 0)?;
    Ok(flat
        .zeros_like()?
        .index_add(&idx, &vals, 0)?
        .reshape(src.shape())?)
}

/// `g` zeroed wherever `acts` is not positive (the ReLU's derivative and the selection at once), and its
/// column sums in f32 (in one pass on CUDA, in a fixed order).
fn mask_colsum(g: Tensor, acts: &Tensor) -> candle_core::Result<(Tensor, Tensor)> {
    #[cfg(feature = "cuda")]
    if g.device().is_cuda() {
        let g = g.contiguous()?;
        let sums = crate::cuda::mask_colsum_inplace(&g, &acts.contiguous()?)?;
        return Ok((g, sums));
    }
    let g = (g * acts.gt(0f64)?.to_dtype(acts.dtype())?)?;
    let sums = g.to_dtype(DType::F32)?.sum(0)?;
    Ok((g, sums))
}

/// `src [|D|, c]` placed at the rows `cols` of a zero [n, c] (all rows when None).
fn scatter_rows(src: Tensor, cols: Option<&Tensor>, n: usize) -> candle_core::Result<Tensor> {
    let Some(cols) = cols else { return Ok(src) };
    let zeros = Tensor::zeros((n, src.dim(1)?), DType::F32, src.device())?;
    #[cfg(feature = "cuda")]
    if src.device().is_cuda() {
        crate::cuda::rows_add_inplace(&zeros, Some(cols), &src.contiguous()?)?;
        return Ok(zeros);
    }
    zeros.index_add(cols, &src, 0)
}

/// A zero scalar in the forward pass (inputs b_dec, b_enc) whose backward, given the loss's gradient,
/// forms the gradient `g = −2·scale·grad·err` of the aux reconstruction (one pass over [B, d]) and
/// computes every gradient of `A·W_dec[D]` by matmuls: W_dec[D] gets Aᵀ·g, the aux activations
/// dA = (g·W_dec[D]ᵀ) ⊙ [A > 0] (the mask in one pass that also sums the columns), W_enc[D] gets dAᵀ·xc,
/// b_enc[D] the column sums c = 1ᵀ·dA,
/// and b_dec (through xc = x − b_dec) −c·W_enc[D]: a vector-matrix product instead of the B×|D|×d matmul
/// of the per-token input gradient.
struct DeadColumnsGrad {
    /// The centered input [B, d], detached.
    xc: Tensor,
    /// The aux residual `e − A·W_dec[D]` [B, d] (f32) and the loss's factor on its sum of squares.
    err: Tensor,
    scale: f64,
    /// [B, |D|] in the scores' dtype.
    acts: Tensor,
    /// [|D|, d] in the scores' dtype.
    w_enc_d: Tensor,
    w_dec_d: Tensor,
    /// The dead latents (u32, without the padding), None when every latent is dead; their count.
    cols: Option<Tensor>,
    n_dead: usize,
    n: usize,
    sinks: WeightSinks,
}

impl CustomOp2 for DeadColumnsGrad {
    fn name(&self) -> &'static str {
        "aux-dead-columns"
    }

    cpu_fwd!(|_, (_s1, _l1), (_s2, _l2)| Ok(crate::sparse::zero_loss_cpu()));

    cuda_fwd!(|_, (s1, _l1), (_s2, _l2)| crate::sparse::zero_loss_cuda(s1));

    fn bwd(
        &self,
        _b_dec: &Tensor,
        _b_enc: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let dtype = self.acts.dtype();
        let g = scale_to(&self.err, -2.0 * self.scale, Some(grad), dtype)?;
        let cols = self.cols.as_ref();
        // The padded columns' rows of every product are dropped (their activations are zero).
        let real = |t: Tensor| t.narrow(0, 0, self.n_dead);
        self.sinks
            .w_dec
            .add_rows(cols, &real(batch_reduce(&self.acts, &g)?)?, self.n)?;
        let (d_acts, col_sums) = mask_colsum(g.matmul(&self.w_dec_d.t()?)?, &self.acts)?;
        let xc = if dtype == self.xc.dtype() {
            self.xc.clone()
        } else {
            scale_to(&self.xc, 1.0, None, dtype)?
        };
        self.sinks
            .w_enc
            .add_rows(cols, &real(batch_reduce(&d_acts, &xc)?)?, self.n)?;
        drop(d_acts);
        let d_b_dec = col_sums
            .to_dtype(dtype)?
            .unsqueeze(0)?
            .matmul(&self.w_enc_d)?
            .neg()?
            .to_dtype(DType::F32)?
            .flatten_all()?;
        let d_b_enc = real(col_sums.unsqueeze(1)?)?.contiguous()?;
        let d_b_enc = scatter_rows(d_b_enc, cols, self.n)?.reshape(self.n)?;
        Ok((Some(d_b_dec), Some(d_b_enc)))
    }
}
