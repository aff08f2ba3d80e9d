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
use crate::select::select_rows;
use crate::Result;
use candle_core::{CpuStorage, CustomOp2, DType, Layout, Shape, Tensor};

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

/// The dead latents' reconstruction [B, d] (without b_dec): `A·W_dec[D]`, A [B, |D|] the `keep` largest
/// scores of each row among the dead columns (zeros elsewhere), `xc = x − b_dec` the centered input.
/// Differentiable wrt b_dec and b_enc through candle's autograd; W_enc's and W_dec's gradients go to
/// `sinks`.
#[allow(clippy::too_many_arguments)] // the step's tensors and the selector, each used once
pub fn dead_columns_decode(
    sae: &Sae,
    sinks: &WeightSinks,
    xc: &Tensor,
    scores: &Tensor,
    (mask, n_dead): (&Tensor, usize),
    keep: usize,
    (selector, seed): (profk::Selector, u64),
) -> Result<Tensor> {
    let n = sae.shape.n;
    let cols = if n_dead < n {
        Some(dead_columns(mask)?)
    } else {
        None
    };
    let scores_d = match &cols {
        Some(c) => scores.index_select(c, 1)?,
        None => scores.clone(),
    }
    .contiguous()?;
    let acts = if keep >= n_dead {
        scores_d
    } else {
        let flat = select_rows(&scores_d, keep, selector, seed)?;
        scatter(&scores_d, &flat)?
    };
    let dtype = acts.dtype();
    let pick = |w: &Tensor| -> Result<Tensor> {
        let w = w.detach();
        let w = match &cols {
            Some(c) => w.index_select(c, 0)?,
            None => w,
        };
        Ok(w.to_dtype(dtype)?.contiguous()?)
    };
    let w_dec_d = pick(sae.w_dec.as_tensor())?;
    let w_enc_d = pick(sae.w_enc.as_tensor())?;
    let recon = acts.matmul(&w_dec_d)?.to_dtype(DType::F32)?;
    let grads = DeadColumnsGrad {
        xc: xc.detach(),
        acts,
        w_enc_d,
        w_dec_d,
        cols,
        n,
        sinks: sinks.clone(),
    };
    let tap = sae
        .b_dec
        .as_tensor()
        .apply_op2(sae.b_enc.as_tensor(), grads)?;
    Ok((recon + tap)?)
}

/// The dead latents (u32) of a u8 mask [n].
fn dead_columns(mask: &Tensor) -> Result<Tensor> {
    let host: Vec<u8> = mask.to_dtype(DType::U8)?.to_vec1()?;
    let cols: Vec<u32> = (0..host.len() as u32)
        .filter(|&j| host[j as usize] != 0)
        .collect();
    let len = cols.len();
    Ok(Tensor::from_vec(cols, len, mask.device())?)
}

/// Zeros the shape of `src` [B, m] except at the flat indices `idx` (i64), which keep `src`'s values.
fn scatter(src: &Tensor, idx: &Tensor) -> Result<Tensor> {
    let idx = idx.to_dtype(DType::I64)?.contiguous()?;
    #[cfg(feature = "cuda")]
    if src.device().is_cuda() {
        let out = Tensor::zeros(src.shape(), src.dtype(), src.device())?;
        crate::cuda::scatter_pairs(src, &idx, &out)?;
        return Ok(out);
    }
    let flat = src.flatten_all()?;
    let vals = flat.index_select(&idx, 0)?;
    Ok(flat
        .zeros_like()?
        .index_add(&idx, &vals, 0)?
        .reshape(src.shape())?)
}

/// `g` zeroed wherever `acts` is not positive: the ReLU's derivative and the selection at once.
fn mask_nonpositive(g: Tensor, acts: &Tensor) -> candle_core::Result<Tensor> {
    #[cfg(feature = "cuda")]
    if g.device().is_cuda() {
        crate::cuda::mask_nonpositive_inplace(&g, acts)?;
        return Ok(g);
    }
    let keep = acts.gt(0f64)?.to_dtype(g.dtype())?;
    g * keep
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

/// A zero [B, d] in the forward pass (inputs b_dec, b_enc) whose backward, given the gradient `g` of the
/// aux reconstruction, computes every gradient of `A·W_dec[D]` by matmuls: W_dec[D] gets Aᵀ·g, the aux
/// activations dA = (g·W_dec[D]ᵀ) ⊙ [A > 0], W_enc[D] gets dAᵀ·xc, b_enc[D] the column sums c = 1ᵀ·dA,
/// and b_dec (through xc = x − b_dec) −c·W_enc[D]: a vector-matrix product instead of the B×|D|×d matmul
/// of the per-token input gradient.
struct DeadColumnsGrad {
    /// The centered input [B, d], detached.
    xc: Tensor,
    /// [B, |D|] in the scores' dtype.
    acts: Tensor,
    /// [|D|, d] in the scores' dtype.
    w_enc_d: Tensor,
    w_dec_d: Tensor,
    /// The dead latents (u32), None when every latent is dead.
    cols: Option<Tensor>,
    n: usize,
    sinks: WeightSinks,
}

impl CustomOp2 for DeadColumnsGrad {
    fn name(&self) -> &'static str {
        "aux-dead-columns"
    }

    fn cpu_fwd(
        &self,
        _s1: &CpuStorage,
        _l1: &Layout,
        _s2: &CpuStorage,
        _l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let shape = self.xc.shape().clone();
        Ok((CpuStorage::F32(vec![0f32; shape.elem_count()]), shape))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::cuda::CudaStorage,
        _l1: &Layout,
        _s2: &candle_core::cuda::CudaStorage,
        _l2: &Layout,
    ) -> candle_core::Result<(candle_core::cuda::CudaStorage, Shape)> {
        let shape = self.xc.shape().clone();
        let zeros = s1.device.alloc_zeros::<f32>(shape.elem_count().max(1))?;
        Ok((
            candle_core::cuda::CudaStorage::wrap_cuda_slice(zeros, s1.device.clone()),
            shape,
        ))
    }

    fn bwd(
        &self,
        _b_dec: &Tensor,
        _b_enc: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let dtype = self.acts.dtype();
        let g = grad.to_dtype(dtype)?.contiguous()?;
        let cols = self.cols.as_ref();
        self.sinks
            .w_dec
            .add_rows(cols, &self.acts.t()?.matmul(&g)?, self.n)?;
        let d_acts = mask_nonpositive(g.matmul(&self.w_dec_d.t()?)?, &self.acts)?;
        let xc = self.xc.to_dtype(dtype)?;
        self.sinks
            .w_enc
            .add_rows(cols, &d_acts.t()?.matmul(&xc)?, self.n)?;
        let ones = Tensor::ones((1, d_acts.dim(0)?), dtype, d_acts.device())?;
        let col_sums = ones.matmul(&d_acts)?;
        drop(d_acts);
        let d_b_dec = col_sums
            .matmul(&self.w_enc_d)?
            .neg()?
            .to_dtype(DType::F32)?
            .flatten_all()?;
        let d_b_enc = col_sums.to_dtype(DType::F32)?.t()?.contiguous()?;
        let d_b_enc = scatter_rows(d_b_enc, cols, self.n)?.reshape(self.n)?;
        Ok((Some(d_b_dec), Some(d_b_enc)))
    }
}
