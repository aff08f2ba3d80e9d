//! Differentiable operations on the S = B·k selected (row, latent) pairs, given as flat indices
//! `row · n + col` (i64, ascending): they replace every B×n tensor of the training graph by S-sized ones.
//!
//! - [`sparse_decode`]: `out[b] = Σ_{s: row(s)=b} vals[s] · W[col(s)]` (W [n, d]); backward
//!   `d vals[s] = g[row(s)]·W[col(s)]`, `dW[j] = Σ_{s: col(s)=j} vals[s] · g[row(s)]`.
//! - [`gather_linear`]: `out[s] = xc[row(s)]·W[col(s)] + b[col(s)]`, the encoder's pre-activation at the
//!   selected pairs only (W the encoder as [n, d] rows); backward `d xc` is a sparse decode with W,
//!   `dW[j] = Σ_{s: col(s)=j} g[s] · xc[row(s)]`, `db[j] = Σ_{s: col(s)=j} g[s]`.
//!
//! Three primitives serve both: decode by rows, one dot product per pair, and a reduction grouped by
//! latent. Each has a CPU body (rayon) and a CUDA kernel (`kernels/sparse.cu`); sums run in pair order
//! on both, the per-latent ones over a stable sort of the pairs by latent, so results are deterministic.
//! On CUDA the indices are not range-checked (the selection produces them); on the CPU they are.
use crate::Result;
use candle_core::{CpuStorage, CustomOp3, DType, Layout, Shape, Tensor};
use rayon::prelude::*;
use runtime::{cpu_fwd, cuda_fwd};
use std::sync::{Arc, Mutex};

/// Decodes `vals [S]` at flat indices `idx [S]` with `w [n, d]` into `[batch, d]`.
pub fn sparse_decode(vals: &Tensor, idx: &Tensor, w: &Tensor, batch: usize) -> Result<Tensor> {
    sparse_decode_to(vals, idx, w, batch, None)
}

/// [`sparse_decode`]; with a sink, W's gradient goes there instead of through candle's autograd.
pub fn sparse_decode_to(
    vals: &Tensor,
    idx: &Tensor,
    w: &Tensor,
    batch: usize,
    sink: Option<&GradSink>,
) -> Result<Tensor> {
    let (n, _) = w.dims2()?;
    let idx = idx.to_dtype(DType::I64)?.contiguous()?;
    let w = match sink {
        Some(_) => w.detach(),
        None => w.clone(),
    };
    let op = DecodeRows {
        batch,
        n,
        sink: sink.cloned(),
    };
    Ok(vals.contiguous()?.apply_op3(&idx, &w.contiguous()?, op)?)
}

/// `xc[row(s)]·w[col(s)] + b[col(s)]` for every flat index of `idx [S]`; xc [B, d], w [n, d], b [n].
pub fn gather_linear(xc: &Tensor, w: &Tensor, b: &Tensor, idx: &Tensor) -> Result<Tensor> {
    gather_linear_to(xc, w, b, idx, None)
}

/// [`gather_linear`]; with a sink, W's gradient goes there instead of through candle's autograd.
pub fn gather_linear_to(
    xc: &Tensor,
    w: &Tensor,
    b: &Tensor,
    idx: &Tensor,
    sink: Option<&GradSink>,
) -> Result<Tensor> {
    let idx = idx.to_dtype(DType::I64)?.contiguous()?;
    let w = match sink {
        Some(_) => w.detach(),
        None => w.clone(),
    };
    let op = GatherLinear {
        idx,
        sink: sink.cloned(),
    };
    Ok(xc
        .contiguous()?
        .apply_op3(&w.contiguous()?, &b.contiguous()?, op)?)
}

/// Receives the dense weight gradient [n, d] of the pair ops outside candle's gradient store, whose
/// accumulation (a zero tensor plus an add per contribution) costs three passes over n·d floats in
/// unfused kernels; here the first per-latent reduction is kept as computed (it writes every row) and
/// later ones are reduced into it in place (CUDA). Row blocks (the dense aux-k form's) that arrive before
/// any reduction wait, and are added into its result: no zero [n, d] to fill and re-read.
#[derive(Clone, Debug, Default)]
pub struct GradSink(Arc<Mutex<Slot>>);

#[derive(Debug, Default)]
struct Slot {
    acc: Option<Tensor>,
    /// Row blocks `(rows, src [count, d], n)` not yet added (no `acc` when they came).
    pending: Vec<(Option<Tensor>, Tensor, usize)>,
}

impl GradSink {
    /// The gradient gathered since the last take.
    pub fn take(&self) -> candle_core::Result<Option<Tensor>> {
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let pending = std::mem::take(&mut slot.pending);
        let mut acc = slot.acc.take();
        for (rows, src, n) in pending {
            acc = Some(match acc {
                Some(acc) => rows_add(acc, rows.as_ref(), &src)?,
                None if rows.is_none() && src.dim(0)? == n => src,
                None => {
                    let zeros = Tensor::zeros((n, src.dim(1)?), DType::F32, src.device())?;
                    rows_add(zeros, rows.as_ref(), &src)?
                }
            });
        }
        Ok(acc)
    }

    /// Adds the per-latent reduction of `vals[s]·rows[row(s)]`.
    pub(crate) fn add_col_reduce(
        &self,
        rows: &Tensor,
        idx: &Tensor,
        vals: &Tensor,
        n: usize,
    ) -> candle_core::Result<()> {
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let (rows, vals) = (rows.detach().contiguous()?, vals.detach().contiguous()?);
        match slot.acc.take() {
            None => {
                let pending = std::mem::take(&mut slot.pending);
                // One block of every row (all latents dead) is the accumulator itself.
                #[cfg(feature = "cuda")]
                if rows.device().is_cuda()
                    && pending.len() == 1
                    && pending[0].0.is_none()
                    && pending[0].1.dim(0)? == n
                {
                    let acc = pending[0].1.clone();
                    crate::cuda::col_reduce_into(&acc, &rows, idx, &vals)?;
                    slot.acc = Some(acc);
                    return Ok(());
                }
                let mut acc = rows.apply_op3_no_bwd(idx, &vals, &ColReduce { n })?;
                for (rows, src, _) in pending {
                    acc = rows_add(acc, rows.as_ref(), &src)?;
                }
                slot.acc = Some(acc);
            }
            Some(acc) => {
                #[cfg(feature = "cuda")]
                if acc.device().is_cuda() {
                    crate::cuda::col_reduce_into(&acc, &rows, idx, &vals)?;
                    slot.acc = Some(acc);
                    return Ok(());
                }
                slot.acc = Some((acc + rows.apply_op3_no_bwd(idx, &vals, &ColReduce { n })?)?);
            }
        }
        Ok(())
    }

    /// Adds `src [count, d]` to the rows `rows` (u32, distinct; rows 0..count when None) of the gradient
    /// [n, d].
    pub(crate) fn add_rows(
        &self,
        rows: Option<&Tensor>,
        src: &Tensor,
        n: usize,
    ) -> candle_core::Result<()> {
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let src = src.detach().to_dtype(DType::F32)?.contiguous()?;
        match slot.acc.take() {
            Some(acc) => slot.acc = Some(rows_add(acc, rows, &src)?),
            None => slot.pending.push((rows.cloned(), src, n)),
        }
        Ok(())
    }
}

/// `acc [n, d]` plus `src [count, d]` at the rows `rows` (distinct; rows 0..count when None), in place on
/// CUDA.
fn rows_add(acc: Tensor, rows: Option<&Tensor>, src: &Tensor) -> candle_core::Result<Tensor> {
    #[cfg(feature = "cuda")]
    if acc.device().is_cuda() {
        crate::cuda::rows_add_inplace(&acc, rows, src)?;
        return Ok(acc);
    }
    match rows {
        Some(rows) => acc.index_add(rows, src, 0),
        None => acc + src,
    }
}

/// The device-agnostic formulation through candle ops (materializes an S×d temporary).
pub fn gather_decode(vals: &Tensor, idx: &Tensor, w: &Tensor, batch: usize) -> Result<Tensor> {
    let (n, d) = w.dims2()?;
    let (rows, cols) = split_flat(idx, n)?;
    let picked = w
        .index_select(&cols, 0)?
        .broadcast_mul(&vals.unsqueeze(1)?)?;
    let zeros = Tensor::zeros((batch, d), w.dtype(), w.device())?;
    Ok(zeros.index_add(&rows, &picked, 0)?)
}

/// Row and column (i64) of flat indices `row · n + col`.
pub fn split_flat(idx: &Tensor, n: usize) -> Result<(Tensor, Tensor)> {
    let idx = idx.to_dtype(DType::I64)?;
    let n_t = Tensor::new(n as i64, idx.device())?;
    let rows = idx.broadcast_div(&n_t)?;
    let cols = (&idx - rows.broadcast_mul(&n_t)?)?;
    Ok((rows, cols))
}

/// Dense activations: `zeros[B, n]` with the values scattered in (differentiable through `vals`).
pub fn dense_acts(vals: &Tensor, idx: &Tensor, batch: usize, n: usize) -> Result<Tensor> {
    let flat = Tensor::zeros(batch * n, vals.dtype(), vals.device())?;
    Ok(flat
        .index_add(&idx.to_dtype(DType::I64)?, vals, 0)?
        .reshape((batch, n))?)
}

/// Dense reference: [`dense_acts`] times `w`.
pub fn dense_decode(vals: &Tensor, idx: &Tensor, w: &Tensor, batch: usize) -> Result<Tensor> {
    let (n, _) = w.dims2()?;
    Ok(dense_acts(vals, idx, batch, n)?.matmul(w)?)
}

/// [n] f32: 1 for every latent with a pair of positive value, else 0.
pub fn fired_latents(idx: &Tensor, vals: &Tensor, n: usize) -> Result<Tensor> {
    let idx = idx.to_dtype(DType::I64)?.contiguous()?;
    let vals = vals.detach().contiguous()?;
    #[cfg(feature = "cuda")]
    if idx.device().is_cuda() {
        return Ok(crate::cuda::fired(&idx, &vals, n)?);
    }
    let idx: Vec<i64> = idx.to_vec1()?;
    let vals: Vec<f32> = vals.to_vec1()?;
    let mut out = vec![0f32; n];
    for (&i, &v) in idx.iter().zip(&vals) {
        if v > 0.0 {
            out[(i as usize) % n] = 1.0;
        }
    }
    Ok(Tensor::from_vec(out, n, &candle_core::Device::Cpu)?)
}

// ---- CPU primitives ----

/// The forward value of the loss ops whose whole work is in their backward: a scalar 0.
pub(crate) fn zero_loss_cpu() -> (CpuStorage, Shape) {
    (CpuStorage::F32(vec![0f32]), Shape::from(()))
}

/// [`zero_loss_cpu`] on the device of `like`.
#[cfg(feature = "cuda")]
pub(crate) fn zero_loss_cuda(
    like: &candle_core::cuda::CudaStorage,
) -> candle_core::Result<(candle_core::cuda::CudaStorage, Shape)> {
    let zero = like.device.alloc_zeros::<f32>(1)?;
    Ok((
        candle_core::cuda::CudaStorage::wrap_cuda_slice(zero, like.device.clone()),
        Shape::from(()),
    ))
}

fn slice_f32<'a>(s: &'a CpuStorage, l: &Layout, what: &str) -> candle_core::Result<&'a [f32]> {
    let data = s.as_slice::<f32>()?;
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&data[a..b]),
        None => candle_core::bail!("sparse op: {what} must be contiguous"),
    }
}

fn slice_i64<'a>(s: &'a CpuStorage, l: &Layout) -> candle_core::Result<&'a [i64]> {
    let data = s.as_slice::<i64>()?;
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&data[a..b]),
        None => candle_core::bail!("sparse op: indices must be contiguous"),
    }
}

fn check_range(idx: &[i64], rows: usize, n: usize) -> candle_core::Result<()> {
    let end = (rows * n) as i64;
    if let Some(bad) = idx.iter().find(|&&i| i < 0 || i >= end) {
        candle_core::bail!("sparse op: flat index {bad} out of range for {rows} rows of {n}")
    }
    Ok(())
}

/// Positions of the pairs grouped by `key(s)` in `0..buckets`, in pair order within a group: a stable
/// counting sort (offsets, order).
fn bucket(idx: &[i64], buckets: usize, key: impl Fn(i64) -> usize) -> (Vec<usize>, Vec<u32>) {
    let mut offsets = vec![0usize; buckets + 1];
    for &i in idx {
        offsets[key(i) + 1] += 1;
    }
    for b in 0..buckets {
        offsets[b + 1] += offsets[b];
    }
    let mut next = offsets.clone();
    let mut order = vec![0u32; idx.len()];
    for (s, &i) in idx.iter().enumerate() {
        let b = key(i);
        order[next[b]] = s as u32;
        next[b] += 1;
    }
    (offsets, order)
}

fn cpu_decode_rows(
    vals: &[f32],
    idx: &[i64],
    w: &[f32],
    batch: usize,
    n: usize,
    d: usize,
) -> Vec<f32> {
    let n = n as i64;
    let (offsets, order) = bucket(idx, batch, |i| (i / n) as usize);
    let mut out = vec![0f32; batch * d];
    out.par_chunks_mut(d.max(1))
        .enumerate()
        .for_each(|(b, row)| {
            for &s in &order[offsets[b]..offsets[b + 1]] {
                let v = vals[s as usize];
                let col = (idx[s as usize] % n) as usize;
                for (o, &wv) in row.iter_mut().zip(&w[col * d..(col + 1) * d]) {
                    *o = v.mul_add(wv, *o);
                }
            }
        });
    out
}

fn cpu_dot_pairs(
    g: &[f32],
    idx: &[i64],
    w: &[f32],
    b: Option<&[f32]>,
    n: usize,
    d: usize,
) -> Vec<f32> {
    let n = n as i64;
    idx.par_iter()
        .map(|&i| {
            let (row, col) = ((i / n) as usize, (i % n) as usize);
            let dot = g[row * d..(row + 1) * d]
                .iter()
                .zip(&w[col * d..(col + 1) * d])
                .fold(0f32, |acc, (x, y)| x.mul_add(*y, acc));
            dot + b.map_or(0.0, |b| b[col])
        })
        .collect()
}

fn cpu_col_reduce(g: &[f32], idx: &[i64], vals: &[f32], n: usize, d: usize) -> Vec<f32> {
    let n_i = n as i64;
    let (offsets, order) = bucket(idx, n, |i| (i % n_i) as usize);
    let mut out = vec![0f32; n * d];
    out.par_chunks_mut(d.max(1))
        .enumerate()
        .for_each(|(c, row)| {
            for &s in &order[offsets[c]..offsets[c + 1]] {
                let v = vals[s as usize];
                let r = (idx[s as usize] / n_i) as usize;
                for (o, &x) in row.iter_mut().zip(&g[r * d..(r + 1) * d]) {
                    *o = v.mul_add(x, *o);
                }
            }
        });
    out
}

#[cfg(feature = "cuda")]
mod gpu {
    pub(super) use crate::cuda::{col_reduce, decode_rows, dot_pairs, storage_ptr};
}

// ---- The custom ops ----

/// vals [S], idx [S] i64, w [n, d] → [batch, d].
struct DecodeRows {
    batch: usize,
    n: usize,
    sink: Option<GradSink>,
}

impl CustomOp3 for DecodeRows {
    fn name(&self) -> &'static str {
        "sparse-decode"
    }

    cpu_fwd!(|op, (s1, l1), (s2, l2), (s3, l3)| {
        let (vals, idx, w) = (
            slice_f32(s1, l1, "values")?,
            slice_i64(s2, l2)?,
            slice_f32(s3, l3, "W")?,
        );
        check_range(idx, op.batch, op.n)?;
        let d = l3.dims()[1];
        let out = cpu_decode_rows(vals, idx, w, op.batch, op.n, d);
        Ok((CpuStorage::F32(out), Shape::from((op.batch, d))))
    });

    cuda_fwd!(|op, (s1, l1), (s2, l2), (s3, l3)| {
        let d = l3.dims()[1];
        let ptrs = (
            gpu::storage_ptr::<f32>(s1, l1, "values")?,
            gpu::storage_ptr::<i64>(s2, l2, "indices")?,
            gpu::storage_ptr::<f32>(s3, l3, "W")?,
        );
        let pairs = l2.shape().elem_count();
        let out = gpu::decode_rows(&s1.device, ptrs, pairs, op.batch, op.n, d)?;
        Ok((out, Shape::from((op.batch, d))))
    });

    fn bwd(
        &self,
        vals: &Tensor,
        idx: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let grad = grad.contiguous()?;
        let d_vals = grad.apply_op3_no_bwd(idx, w, &PairDot { n: self.n })?;
        if let Some(sink) = &self.sink {
            sink.add_col_reduce(&grad, idx, vals, self.n)?;
            return Ok((Some(d_vals), None, None));
        }
        let d_w = grad.apply_op3_no_bwd(idx, &vals.detach(), &ColReduce { n: self.n })?;
        Ok((Some(d_vals), None, Some(d_w)))
    }
}

/// xc [B, d], w [n, d], b [n] → [S] at the pairs of `idx`.
struct GatherLinear {
    idx: Tensor,
    sink: Option<GradSink>,
}

impl CustomOp3 for GatherLinear {
    fn name(&self) -> &'static str {
        "gather-linear"
    }

    cpu_fwd!(|op, (s1, l1), (s2, l2), (s3, l3)| {
        let (xc, w, b) = (
            slice_f32(s1, l1, "input")?,
            slice_f32(s2, l2, "W")?,
            slice_f32(s3, l3, "b")?,
        );
        let idx = op.idx.to_vec1::<i64>()?;
        let (rows, d) = (l1.dims()[0], l1.dims()[1]);
        let n = l2.dims()[0];
        check_range(&idx, rows, n)?;
        let out = cpu_dot_pairs(xc, &idx, w, Some(b), n, d);
        Ok((CpuStorage::F32(out), Shape::from(idx.len())))
    });

    cuda_fwd!(|op, (s1, l1), (s2, l2), (s3, l3)| {
        let (idx_p, _) = crate::cuda::tensor_ptr(&op.idx)?;
        let ptrs = (
            gpu::storage_ptr::<f32>(s1, l1, "input")?,
            idx_p,
            gpu::storage_ptr::<f32>(s2, l2, "W")?,
            gpu::storage_ptr::<f32>(s3, l3, "b")?,
        );
        let pairs = op.idx.elem_count();
        let out = gpu::dot_pairs(&s1.device, ptrs, pairs, l2.dims()[0], l1.dims()[1])?;
        Ok((out, Shape::from(pairs)))
    });

    fn bwd(
        &self,
        xc: &Tensor,
        w: &Tensor,
        _b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let grad = grad.contiguous()?;
        let (batch, _) = xc.dims2()?;
        let (n, _) = w.dims2()?;
        let decode = DecodeRows {
            batch,
            n,
            sink: None,
        };
        let d_xc = grad.apply_op3_no_bwd(&self.idx, &w.detach(), &decode)?;
        let d_w = match &self.sink {
            Some(sink) => {
                sink.add_col_reduce(xc, &self.idx, &grad, n)?;
                None
            }
            None => Some(
                xc.detach()
                    .apply_op3_no_bwd(&self.idx, &grad, &ColReduce { n })?,
            ),
        };
        let ones = Tensor::ones((batch, 1), DType::F32, xc.device())?;
        let d_b = ones
            .apply_op3_no_bwd(&self.idx, &grad, &ColReduce { n })?
            .reshape(n)?;
        Ok((Some(d_xc), d_w, Some(d_b)))
    }
}

/// g [B, d], idx [S], w [n, d] → [S]: g[row(s)]·w[col(s)].
pub(crate) struct PairDot {
    pub(crate) n: usize,
}

impl CustomOp3 for PairDot {
    fn name(&self) -> &'static str {
        "pair-dot"
    }

    cpu_fwd!(|op, (s1, l1), (s2, l2), (s3, l3)| {
        let (g, idx, w) = (
            slice_f32(s1, l1, "gradient")?,
            slice_i64(s2, l2)?,
            slice_f32(s3, l3, "W")?,
        );
        check_range(idx, l1.dims()[0], op.n)?;
        let out = cpu_dot_pairs(g, idx, w, None, op.n, l3.dims()[1]);
        Ok((CpuStorage::F32(out), Shape::from(idx.len())))
    });

    cuda_fwd!(|op, (s1, l1), (s2, l2), (s3, l3)| {
        let ptrs = (
            gpu::storage_ptr::<f32>(s1, l1, "gradient")?,
            gpu::storage_ptr::<i64>(s2, l2, "indices")?,
            gpu::storage_ptr::<f32>(s3, l3, "W")?,
            0u64,
        );
        let pairs = l2.shape().elem_count();
        let out = gpu::dot_pairs(&s1.device, ptrs, pairs, op.n, l3.dims()[1])?;
        Ok((out, Shape::from(pairs)))
    });
}

/// g [B, d], idx [S], vals [S] → [n, d]: row j = Σ_{s: col(s)=j} vals[s]·g[row(s)], in pair order.
pub(crate) struct ColReduce {
    pub(crate) n: usize,
}

impl CustomOp3 for ColReduce {
    fn name(&self) -> &'static str {
        "col-reduce"
    }

    cpu_fwd!(|op, (s1, l1), (s2, l2), (s3, l3)| {
        let (g, idx, vals) = (
            slice_f32(s1, l1, "rows")?,
            slice_i64(s2, l2)?,
            slice_f32(s3, l3, "values")?,
        );
        check_range(idx, l1.dims()[0], op.n)?;
        let d = l1.dims()[1];
        let out = cpu_col_reduce(g, idx, vals, op.n, d);
        Ok((CpuStorage::F32(out), Shape::from((op.n, d))))
    });

    cuda_fwd!(|op, (s1, l1), (s2, l2), (s3, l3)| {
        let d = l1.dims()[1];
        let ptrs = (
            gpu::storage_ptr::<f32>(s1, l1, "rows")?,
            gpu::storage_ptr::<i64>(s2, l2, "indices")?,
            gpu::storage_ptr::<f32>(s3, l3, "values")?,
        );
        let pairs = l2.shape().elem_count();
        let out = gpu::col_reduce(&s1.device, ptrs, pairs, op.n, d)?;
        Ok((out, Shape::from((op.n, d))))
    });
}
