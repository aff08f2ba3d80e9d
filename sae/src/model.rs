//! Parameters shared by every architecture and the batch-global encoder:
//! `pre = ReLU((x − b_dec)·W_enc + b_enc)`, then the B·k largest entries of `pre` over the whole batch.
use crate::config::{Arch, DecodeMode};
use crate::distributed::BatchShare;
use crate::select::{select_flat, Selected};
use crate::sparse::{gather_linear_to, sparse_decode_to, GradSink};
use crate::{Error, Result};
use candle_core::{DType, Device, Tensor, Var};
use collective::WireCount;
use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};
use rayon::prelude::*;
use std::cell::OnceCell;
use std::time::{Duration, Instant};

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

/// Trainable parameters. W_enc [n, d_in] (one contiguous row of encoder weights per latent, the transpose
/// of SAELens' W_enc [d_in, n]), b_enc [n], W_dec [n, d_in], b_dec [d_in].
pub struct Sae {
    pub shape: Shape,
    pub w_enc: Var,
    pub b_enc: Var,
    pub w_dec: Var,
    pub b_dec: Var,
    /// Decode through the (index, value) pairs instead of a dense B×n matrix.
    pub sparse: bool,
    /// Compute the selection scores (the dense encoder matmul) in bf16; the kept values are recomputed
    /// in f32 all the same.
    pub bf16_scores: bool,
    /// On CUDA with f32 scores: compute them on TF32 tensor cores in one cuBLASLt matmul whose
    /// epilogue adds the bias and applies the ReLU (`precision = "tf32"`).
    pub tf32_scores: bool,
    /// Where the gradients of W_enc and W_dec go when set (training); through candle's autograd when
    /// None.
    pub sinks: Option<WeightSinks>,
}

/// The gradient sinks of the two dense weight matrices.
#[derive(Clone, Debug, Default)]
pub struct WeightSinks {
    pub w_enc: GradSink,
    pub w_dec: GradSink,
}

/// The outcome of the encoder on a batch.
pub struct Encoded {
    /// ReLU pre-activations [B, n], detached: what the selection ran on (f32, or bf16 with
    /// `bf16_scores`).
    pub scores: Tensor,
    /// The centered input x − b_dec [B, d_in] (differentiable through b_dec).
    pub xc: Tensor,
    /// Flat indices (row · n + col, i64, ascending) of the kept activations.
    pub idx: Tensor,
    /// Their values ReLU(xc·W_enc[col] + b_enc[col]), recomputed at the kept pairs only (differentiable).
    pub vals: Tensor,
    pub batch: usize,
    /// The dense scores (matmul, bias, ReLU) and the selection, each waited for.
    pub scores_time: Duration,
    pub select_time: Duration,
    /// What the selection sent to the other ranks and its time in collectives (zero in one process).
    pub select_wire: WireCount,
    /// The dense activation matrix, built on first use.
    pub dense: OnceCell<Tensor>,
}

/// Decoder rows per random-number stream of [`Sae::init`].
const INIT_ROWS: usize = 256;

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
        // Fixed blocks of rows, each from its own stream of the seed's generator: on all cores (10^8
        // normals at GPT-2 XL widths), the same values whatever the thread count.
        let mut w = vec![0f32; n * d_in];
        w.par_chunks_mut((INIT_ROWS * d_in).max(1))
            .enumerate()
            .for_each(|(block, rows)| {
                let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
                rng.set_stream(block as u64);
                rows.iter_mut()
                    .for_each(|v| *v = StandardNormal.sample(&mut rng));
                for row in rows.chunks_mut(d_in.max(1)) {
                    let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
                    row.iter_mut().for_each(|v| *v /= norm);
                }
            });
        let w_dec = Tensor::from_vec(w, (n, d_in), device)?;
        let b_enc = Tensor::zeros(n, DType::F32, device)?;
        Self::from_rows(shape, [&w_dec, &b_enc, &w_dec, b_dec], decode)
    }

    /// From [W_enc, b_enc, W_dec, b_dec] in SAELens' layout: W_enc [d_in, n].
    pub fn from_tensors(shape: Shape, params: [&Tensor; 4], decode: DecodeMode) -> Result<Self> {
        let [w_enc, b_enc, w_dec, b_dec] = params;
        let (n, d_in) = (shape.n, shape.d_in());
        if w_enc.dims() != [d_in, n] {
            return Err(Error::Shape(format!(
                "W_enc has shape {:?}, expected {:?}",
                w_enc.dims(),
                [d_in, n]
            )));
        }
        Self::from_rows(shape, [&w_enc.t()?, b_enc, w_dec, b_dec], decode)
    }

    /// From [W_enc, b_enc, W_dec, b_dec] in the internal layout: W_enc [n, d_in]. Every parameter is
    /// copied.
    pub fn from_rows(shape: Shape, params: [&Tensor; 4], decode: DecodeMode) -> Result<Self> {
        let [w_enc, b_enc, w_dec, b_dec] = params;
        let (n, d_in) = (shape.n, shape.d_in());
        let want = [
            ("W_enc (as [n, d_in])", w_enc, vec![n, d_in]),
            ("b_enc", b_enc, vec![n]),
            ("W_dec", w_dec, vec![n, d_in]),
            ("b_dec", b_dec, vec![d_in]),
        ];
        for (name, t, dims) in want.iter() {
            if t.dims() != dims.as_slice() {
                return Err(Error::Shape(format!(
                    "{name} has shape {:?}, expected {dims:?}",
                    t.dims()
                )));
            }
        }
        let sparse = decode != DecodeMode::Dense;
        // A fresh copy of each (the optimizer updates parameters in place on CUDA).
        let var = |t: &Tensor| -> Result<Var> {
            Ok(Var::from_tensor(
                &t.to_dtype(DType::F32)?.contiguous()?.copy()?,
            )?)
        };
        Ok(Self {
            shape,
            w_enc: var(w_enc)?,
            b_enc: var(b_enc)?,
            w_dec: var(w_dec)?,
            b_dec: var(b_dec)?,
            sparse,
            bf16_scores: false,
            tf32_scores: false,
            sinks: None,
        })
    }

    pub fn vars(&self) -> [&Var; 4] {
        [&self.w_enc, &self.b_enc, &self.w_dec, &self.b_dec]
    }

    /// W_enc in SAELens' layout [d_in, n] (a transposed view).
    pub fn w_enc_saelens(&self) -> Result<Tensor> {
        Ok(self.w_enc.as_tensor().t()?)
    }

    pub fn device(&self) -> &Device {
        self.w_enc.device()
    }

    /// Detached ReLU pre-activations [B, n] of centered inputs `xc` [B, d_in]: one dense matmul (TF32
    /// when enabled, bf16 with `bf16_scores`), then bias and ReLU in place on CUDA; with `tf32_scores`
    /// on CUDA, one matmul with the bias and ReLU in its epilogue.
    pub fn scores(&self, xc: &Tensor) -> Result<Tensor> {
        let xc = xc.detach();
        let w = self.w_enc.as_tensor().detach();
        let b = self.b_enc.as_tensor().detach();
        if self.tf32_scores && !self.bf16_scores && xc.device().is_cuda() {
            let op = crate::scores::ScoresTf32;
            return Ok(xc.contiguous()?.apply_op3_no_bwd(
                &w.contiguous()?,
                &b.contiguous()?,
                &op,
            )?);
        }
        let pre = if self.bf16_scores {
            xc.to_dtype(DType::BF16)?
                .matmul(&w.to_dtype(DType::BF16)?.t()?)?
        } else {
            xc.matmul(&w.t()?)?
        };
        #[cfg(feature = "cuda")]
        if pre.device().is_cuda() {
            crate::cuda::bias_relu_inplace(&pre, &b)?;
            return Ok(pre);
        }
        Ok(pre.broadcast_add(&b.to_dtype(pre.dtype())?)?.relu()?)
    }

    /// ReLU pre-activations [B, n] of inputs [B, d_in] (detached).
    pub fn pre_activations(&self, x: &Tensor) -> Result<Tensor> {
        self.scores(&x.broadcast_sub(self.b_dec.as_tensor())?)
    }

    /// ReLU(xc·W_enc + b_enc) at the flat indices `idx`, differentiable wrt xc, W_enc and b_enc.
    pub fn values_at(&self, xc: &Tensor, idx: &Tensor) -> Result<Tensor> {
        let sink = self.sinks.as_ref().map(|s| &s.w_enc);
        let (w, b) = (self.w_enc.as_tensor(), self.b_enc.as_tensor());
        Ok(gather_linear_to(xc, w, b, idx, sink)?.relu()?)
    }

    /// Encoder plus the batch-global selection of B·k activations.
    pub fn encode(&self, x: &Tensor, selector: profk::Selector, seed: u64) -> Result<Encoded> {
        self.encode_in(x, selector, seed, None)
    }

    /// [`Sae::encode`] on this rank's rows of a global batch: with a global selection over the
    /// ranks, this rank's share of the top B·k of the global batch.
    pub fn encode_in(
        &self,
        x: &Tensor,
        selector: profk::Selector,
        seed: u64,
        share: Option<&BatchShare>,
    ) -> Result<Encoded> {
        let t0 = Instant::now();
        let xc = x.broadcast_sub(self.b_dec.as_tensor())?;
        let scores = self.scores(&xc)?;
        let batch = scores.dim(0)?;
        let (Selected { indices, time }, select_wire) = match share {
            Some(share) if share.selects_globally() => {
                let (global, n) = (share.global, self.shape.n);
                share.select(&scores, (global * self.shape.k).min(global * n), seed)?
            }
            _ => {
                let keep = (batch * self.shape.k).min(scores.elem_count());
                let selected = select_flat(&scores, keep, selector, seed)?;
                (selected, WireCount::default())
            }
        };
        let scores_time = t0.elapsed().saturating_sub(time);
        let vals = self.values_at(&xc, &indices)?;
        Ok(Encoded {
            scores,
            xc,
            idx: indices,
            vals,
            batch,
            scores_time,
            select_time: time,
            select_wire,
            dense: OnceCell::new(),
        })
    }

    /// Σ acts · W_dec over every latent, without b_dec.
    pub fn decode_latents(&self, enc: &Encoded) -> Result<Tensor> {
        if self.sparse {
            self.decode_pairs(&enc.vals, &enc.idx, enc.batch)
        } else {
            Ok(dense_acts(enc, self.shape.n)?.matmul(self.w_dec.as_tensor())?)
        }
    }

    /// Σ vals · W_dec over the pairs `idx` (flat over `batch` rows), without b_dec.
    pub fn decode_pairs(&self, vals: &Tensor, idx: &Tensor, batch: usize) -> Result<Tensor> {
        let sink = self.sinks.as_ref().map(|s| &s.w_dec);
        sparse_decode_to(vals, idx, self.w_dec.as_tensor(), batch, sink)
    }
}

/// The dense activation matrix [B, n] (zeros except the kept values; differentiable through them).
pub fn dense_acts(enc: &Encoded, n: usize) -> Result<Tensor> {
    if let Some(acts) = enc.dense.get() {
        return Ok(acts.clone());
    }
    let acts = crate::sparse::dense_acts(&enc.vals, &enc.idx, enc.batch, n)?;
    Ok(enc.dense.get_or_init(|| acts).clone())
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
        let pre = self.pre_activations(x)?.to_dtype(DType::F32)?;
        let keep = pre.gt(threshold)?.to_dtype(DType::F32)?;
        let acts = (pre * &keep)?;
        let l0 = keep.sum_all()?.to_scalar::<f32>()? as f64 / x.dim(0)? as f64;
        let recon = acts
            .matmul(self.w_dec.as_tensor())?
            .broadcast_add(self.b_dec.as_tensor())?;
        Ok((recon, l0))
    }
}
