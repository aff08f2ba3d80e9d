//! Parameters shared by every architecture and the batch-global encoder:
//! `pre = ReLU((x − b_dec)·W_enc + b_enc)`, then the B·k largest entries of `pre` over the whole batch.
use crate::config::{Arch, DecodeMode};
use crate::select::{select_flat, Selected};
use crate::sparse_decode::sparse_decode;
use crate::{Error, Result};
use candle_core::{DType, Device, Tensor, Var};
use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};
use std::cell::OnceCell;
use std::time::Duration;

/// The architecture and its shape: `d_in = layers · d_model` inputs, `n` latents, `k` per token.
#[derive(Clone, Debug, PartialEq)]
pub struct Shape {
    pub arch: Arch,
    pub d_model: usize,
    pub layers: usize,
    pub n: usize,
    pub k: usize,
    /// Matryoshka group sizes (empty otherwise).
    pub groups: Vec<usize>,
}

impl Shape {
    pub fn d_in(&self) -> usize {
        self.d_model * self.layers
    }
}

/// Trainable parameters. W_enc [d_in, n], b_enc [n], W_dec [n, d_in], b_dec [d_in].
pub struct Sae {
    pub shape: Shape,
    pub w_enc: Var,
    pub b_enc: Var,
    pub w_dec: Var,
    pub b_dec: Var,
    /// Decode through the (index, value) pairs instead of a dense B×n matrix.
    pub sparse: bool,
}

/// The outcome of the encoder on a batch.
pub struct Encoded {
    /// ReLU pre-activations [B, n] (differentiable).
    pub pre: Tensor,
    /// Flat indices (row · n + col, i64, ascending) of the kept activations.
    pub idx: Tensor,
    /// Their values, gathered from `pre` (differentiable).
    pub vals: Tensor,
    pub batch: usize,
    pub select_time: Duration,
    /// The dense activation matrix, built on first use.
    pub dense: OnceCell<Tensor>,
}

impl Sae {
    /// W_dec rows random unit vectors, W_enc = W_decᵀ, b_enc = 0, b_dec given (the geometric median).
    pub fn init(
        shape: Shape,
        b_dec: &Tensor,
        decode: DecodeMode,
        seed: u64,
        device: &Device,
    ) -> Result<Self> {
        let (n, d_in) = (shape.n, shape.d_in());
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut w: Vec<f32> = (0..n * d_in)
            .map(|_| StandardNormal.sample(&mut rng))
            .collect();
        for row in w.chunks_mut(d_in) {
            let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
            row.iter_mut().for_each(|v| *v /= norm);
        }
        let w_dec = Tensor::from_vec(w, (n, d_in), device)?;
        let w_enc = w_dec.t()?.contiguous()?;
        let b_enc = Tensor::zeros(n, DType::F32, device)?;
        Self::from_tensors(shape, &w_enc, &b_enc, &w_dec, b_dec, decode)
    }

    pub fn from_tensors(
        shape: Shape,
        w_enc: &Tensor,
        b_enc: &Tensor,
        w_dec: &Tensor,
        b_dec: &Tensor,
        decode: DecodeMode,
    ) -> Result<Self> {
        let (n, d_in) = (shape.n, shape.d_in());
        let want = [
            ("W_enc", w_enc, vec![d_in, n]),
            ("b_enc", b_enc, vec![n]),
            ("W_dec", w_dec, vec![n, d_in]),
        ];
        for (name, t, dims) in want.iter().chain([("b_dec", b_dec, vec![d_in])].iter()) {
            if t.dims() != dims.as_slice() {
                return Err(Error::Shape(format!(
                    "{name} has shape {:?}, expected {dims:?}",
                    t.dims()
                )));
            }
        }
        let sparse = match decode {
            DecodeMode::Sparse => true,
            DecodeMode::Dense => false,
            DecodeMode::Auto => w_dec.device().is_cpu(),
        };
        Ok(Self {
            shape,
            w_enc: Var::from_tensor(&w_enc.to_dtype(DType::F32)?.contiguous()?)?,
            b_enc: Var::from_tensor(&b_enc.to_dtype(DType::F32)?)?,
            w_dec: Var::from_tensor(&w_dec.to_dtype(DType::F32)?.contiguous()?)?,
            b_dec: Var::from_tensor(&b_dec.to_dtype(DType::F32)?)?,
            sparse,
        })
    }

    pub fn vars(&self) -> [&Var; 4] {
        [&self.w_enc, &self.b_enc, &self.w_dec, &self.b_dec]
    }

    pub fn device(&self) -> &Device {
        self.w_enc.device()
    }

    /// ReLU pre-activations [B, n] of inputs [B, d_in].
    pub fn pre_activations(&self, x: &Tensor) -> Result<Tensor> {
        // (x − b_dec)·W_enc written as x·W_enc − b_dec·W_enc: x carries no gradient, so backward computes
        // only W_enc's gradient from the big matmul, and b_dec's from a cheap vector–matrix product.
        let w = self.w_enc.as_tensor();
        // The two biases fold into one [n] vector: one B×n node (and gradient) fewer.
        let shift = self.b_dec.as_tensor().unsqueeze(0)?.matmul(w)?.squeeze(0)?;
        let bias = (self.b_enc.as_tensor() - shift)?;
        Ok(x.matmul(w)?.broadcast_add(&bias)?.relu()?)
    }

    /// Encoder plus the batch-global selection of B·k activations.
    pub fn encode(&self, x: &Tensor, selector: profk::Selector, seed: u64) -> Result<Encoded> {
        let pre = self.pre_activations(x)?;
        let batch = pre.dim(0)?;
        let keep = (batch * self.shape.k).min(pre.elem_count());
        let Selected { indices, time } = select_flat(&pre.detach(), keep, selector, seed)?;
        let vals = pre.flatten_all()?.index_select(&indices, 0)?;
        Ok(Encoded {
            pre,
            idx: indices,
            vals,
            batch,
            select_time: time,
            dense: OnceCell::new(),
        })
    }

    /// Σ acts · W_dec over the latents in `range` (all when None), without b_dec.
    pub fn decode_latents(&self, enc: &Encoded, range: Option<(usize, usize)>) -> Result<Tensor> {
        let n = self.shape.n;
        let w = self.w_dec.as_tensor();
        let Some((start, len)) = range else {
            return if self.sparse {
                sparse_decode(&enc.vals, &enc.idx, w, enc.batch)
            } else {
                Ok(dense_acts(enc, n)?.matmul(w)?)
            };
        };
        let w = w.narrow(0, start, len)?;
        if !self.sparse {
            return Ok(dense_acts(enc, n)?.narrow(1, start, len)?.matmul(&w)?);
        }
        let (pos, sub_idx) = sub_selection(&enc.idx, n, start, len)?;
        let vals = enc.vals.index_select(&pos, 0)?;
        sparse_decode(&vals, &sub_idx, &w, enc.batch)
    }
}

/// The dense activation matrix [B, n] (zeros except the kept values; differentiable through `pre`).
pub fn dense_acts(enc: &Encoded, n: usize) -> Result<Tensor> {
    if let Some(acts) = enc.dense.get() {
        return Ok(acts.clone());
    }
    let (pre, picked) = (enc.pre.detach(), enc.vals.detach());
    let acts = masked_dense(&enc.pre, &pre, &picked, &enc.idx, enc.batch, n, None)?;
    Ok(enc.dense.get_or_init(|| acts).clone())
}

/// `src` [B, n] kept at the selected positions and zeroed elsewhere. `scores` [B, n] is what the selection
/// ran on and `picked` the selected scores (the B·k of a global selection, or k per row when `per_row`).
///
/// A threshold mask `scores ≥ t ∧ scores > 0` (t = smallest picked score, globally or per row) holds every
/// positive pick; when its size equals the number of positive picks it is exactly the positive picks, and
/// zero picks contribute nothing. That costs one compare instead of a scatter of S indices (serial per
/// output on CUDA in candle); on ties at t the scatter is used.
pub fn masked_dense(
    src: &Tensor,
    scores: &Tensor,
    picked: &Tensor,
    idx: &Tensor,
    batch: usize,
    n: usize,
    per_row: Option<usize>,
) -> Result<Tensor> {
    let positive = scores.gt(0f64)?;
    let at_least = match per_row {
        None => scores.ge(picked.min(0)?.to_scalar::<f32>()? as f64)?,
        Some(k) => scores.broadcast_ge(&picked.reshape((batch, k))?.min_keepdim(1)?)?,
    };
    let mask = (at_least * positive)?;
    let want = picked
        .gt(0f64)?
        .to_dtype(DType::F32)?
        .sum_all()?
        .to_scalar::<f32>()?;
    let have = mask.to_dtype(DType::F32)?.sum_all()?.to_scalar::<f32>()?;
    if have == want {
        return Ok(mask.where_cond(src, &src.zeros_like()?)?);
    }
    let vals = src.flatten_all()?.index_select(idx, 0)?;
    let flat = Tensor::zeros(batch * n, vals.dtype(), vals.device())?;
    Ok(flat.index_add(idx, &vals, 0)?.reshape((batch, n))?)
}

/// Positions (u32) of the selections whose column lies in [start, start + len), and their flat indices
/// re-based on that column range.
fn sub_selection(idx: &Tensor, n: usize, start: usize, len: usize) -> Result<(Tensor, Tensor)> {
    let host: Vec<i64> = idx.to_vec1()?;
    let (n, start, len) = (n as i64, start as i64, len as i64);
    let mut pos = Vec::new();
    let mut sub = Vec::new();
    for (s, &i) in host.iter().enumerate() {
        let (row, col) = (i / n, i % n);
        if (start..start + len).contains(&col) {
            pos.push(s as u32);
            sub.push(row * len + col - start);
        }
    }
    let device = idx.device();
    let count = pos.len();
    Ok((
        Tensor::from_vec(pos, count, device)?,
        Tensor::from_vec(sub, count, device)?,
    ))
}

/// Σ over the batch of squared errors per token, averaged over tokens: dictionary_learning's L2 loss.
pub fn l2_loss(x: &Tensor, recon: &Tensor) -> Result<Tensor> {
    Ok((x - recon)?.sqr()?.sum(1)?.mean(0)?)
}

/// One forward pass of an architecture on a batch.
pub struct Forward {
    /// The reconstruction loss the architecture minimizes.
    pub loss: Tensor,
    /// The full-dictionary reconstruction [B, d_in], with b_dec.
    pub recon: Tensor,
    pub enc: Encoded,
}

impl Sae {
    /// Inference without the batch: JumpReLU with one threshold, `acts = pre · [pre > θ]`, decoded densely.
    pub fn reconstruct_threshold(&self, x: &Tensor, threshold: f64) -> Result<(Tensor, f64)> {
        let pre = self.pre_activations(x)?.detach();
        let keep = pre.gt(threshold)?.to_dtype(DType::F32)?;
        let acts = (pre * &keep)?;
        let l0 = keep.sum_all()?.to_scalar::<f32>()? as f64 / x.dim(0)? as f64;
        let recon = acts
            .matmul(self.w_dec.as_tensor())?
            .broadcast_add(self.b_dec.as_tensor())?;
        Ok((recon, l0))
    }
}
