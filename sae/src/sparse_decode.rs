//! Decoding from the selected (index, value) pairs: `out[b] = Σ_{s: row(s)=b} vals[s] · W[col(s)]`, where the
//! flat index of a selection is `row · n + col`. This replaces the dense `B×n` activation matrix times `W`
//! (2·B·n·d flops, most of them on zeros) by S·d multiply-adds with S = B·k.
//!
//! Two formulations with the same value and gradients:
//! - `SparseDecode`, a CPU custom op (forward and backward without any S×d temporary), and
//! - [`gather_decode`], index_select + index_add, which runs on any candle device through autograd.
use crate::Result;
use candle_core::{CpuStorage, CustomOp3, DType, Layout, Shape, Tensor};
use rayon::prelude::*;

/// Decodes `vals [S]` at flat indices `idx [S]` (row · n + col, i64) with `w [n, d]` into `[batch, d]`.
pub fn sparse_decode(vals: &Tensor, idx: &Tensor, w: &Tensor, batch: usize) -> Result<Tensor> {
    let cpu_f32 = vals.device().is_cpu() && vals.dtype() == DType::F32 && w.dtype() == DType::F32;
    if cpu_f32 {
        let (n, _) = w.dims2()?;
        Ok(vals.apply_op3(&idx.to_dtype(DType::I64)?, w, SparseDecode { batch, n })?)
    } else {
        gather_decode(vals, idx, w, batch)
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

/// Dense reference: `zeros[B, n]` with the values scattered in, times `w`.
pub fn dense_decode(vals: &Tensor, idx: &Tensor, w: &Tensor, batch: usize) -> Result<Tensor> {
    let (n, _) = w.dims2()?;
    let flat = Tensor::zeros(batch * n, vals.dtype(), vals.device())?;
    let acts = flat
        .index_add(&idx.to_dtype(DType::I64)?, vals, 0)?
        .reshape((batch, n))?;
    Ok(acts.matmul(w)?)
}

fn slice_f32<'a>(s: &'a CpuStorage, l: &Layout, what: &str) -> candle_core::Result<&'a [f32]> {
    let data = s.as_slice::<f32>()?;
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&data[a..b]),
        None => candle_core::bail!("sparse decode: {what} must be contiguous"),
    }
}

fn slice_i64<'a>(s: &'a CpuStorage, l: &Layout) -> candle_core::Result<&'a [i64]> {
    let data = s.as_slice::<i64>()?;
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&data[a..b]),
        None => candle_core::bail!("sparse decode: indices must be contiguous"),
    }
}

/// Positions of the selections grouped by `key(s)` in `0..buckets`: a counting sort (offsets, order).
fn bucket(
    idx: &[i64],
    buckets: usize,
    key: impl Fn(i64) -> usize,
) -> candle_core::Result<(Vec<usize>, Vec<u32>)> {
    let mut offsets = vec![0usize; buckets + 1];
    for &i in idx {
        let b = key(i);
        if i < 0 || b >= buckets {
            candle_core::bail!("sparse decode: flat index {i} out of range");
        }
        offsets[b + 1] += 1;
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
    Ok((offsets, order))
}

/// Forward: vals [S], idx [S] i64, w [n, d] → [batch, d].
struct SparseDecode {
    batch: usize,
    n: usize,
}

impl CustomOp3 for SparseDecode {
    fn name(&self) -> &'static str {
        "sparse-decode"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let vals = slice_f32(s1, l1, "values")?;
        let idx = slice_i64(s2, l2)?;
        let w = slice_f32(s3, l3, "decoder")?;
        let d = l3.dims()[1];
        let n = self.n as i64;
        let (offsets, order) = bucket(idx, self.batch, |i| (i / n) as usize)?;
        let mut out = vec![0f32; self.batch * d];
        out.par_chunks_mut(d.max(1))
            .enumerate()
            .for_each(|(b, row)| {
                for &s in &order[offsets[b]..offsets[b + 1]] {
                    let v = vals[s as usize];
                    let col = (idx[s as usize] % n) as usize;
                    for (o, &wv) in row.iter_mut().zip(&w[col * d..(col + 1) * d]) {
                        *o += v * wv;
                    }
                }
            });
        Ok((CpuStorage::F32(out), Shape::from((self.batch, d))))
    }

    fn bwd(
        &self,
        vals: &Tensor,
        idx: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let grad = grad.contiguous()?;
        let d_vals = grad.apply_op3_no_bwd(idx, w, &DecodeGradValues { n: self.n })?;
        let d_w = grad.apply_op3_no_bwd(idx, vals, &DecodeGradWeights { n: self.n })?;
        Ok((Some(d_vals), None, Some(d_w)))
    }
}

/// `d vals[s] = grad[row(s)] · w[col(s)]`: grad [B, d], idx [S], w [n, d] → [S].
struct DecodeGradValues {
    n: usize,
}

impl CustomOp3 for DecodeGradValues {
    fn name(&self) -> &'static str {
        "sparse-decode-grad-values"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let grad = slice_f32(s1, l1, "gradient")?;
        let idx = slice_i64(s2, l2)?;
        let w = slice_f32(s3, l3, "decoder")?;
        let d = l3.dims()[1];
        let n = self.n as i64;
        let out: Vec<f32> = idx
            .par_iter()
            .map(|&i| {
                let (row, col) = ((i / n) as usize, (i % n) as usize);
                let g = &grad[row * d..(row + 1) * d];
                g.iter()
                    .zip(&w[col * d..(col + 1) * d])
                    .map(|(a, b)| a * b)
                    .sum()
            })
            .collect();
        let len = out.len();
        Ok((CpuStorage::F32(out), Shape::from(len)))
    }
}

/// `d w[c] = Σ_{s: col(s)=c} vals[s] · grad[row(s)]`: grad [B, d], idx [S], vals [S] → [n, d].
struct DecodeGradWeights {
    n: usize,
}

impl CustomOp3 for DecodeGradWeights {
    fn name(&self) -> &'static str {
        "sparse-decode-grad-weights"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let grad = slice_f32(s1, l1, "gradient")?;
        let idx = slice_i64(s2, l2)?;
        let vals = slice_f32(s3, l3, "values")?;
        let d = l1.dims()[1];
        let n = self.n as i64;
        let (offsets, order) = bucket(idx, self.n, |i| (i % n) as usize)?;
        let mut out = vec![0f32; self.n * d];
        out.par_chunks_mut(d.max(1))
            .enumerate()
            .for_each(|(c, row)| {
                for &s in &order[offsets[c]..offsets[c + 1]] {
                    let v = vals[s as usize];
                    let r = (idx[s as usize] / n) as usize;
                    for (o, &g) in row.iter_mut().zip(&grad[r * d..(r + 1) * d]) {
                        *o += v * g;
                    }
                }
            });
        Ok((CpuStorage::F32(out), Shape::from((self.n, d))))
    }
}
