//! Layer norm over the last dimension: forward only (`layer_norm`, for extraction) and
//! differentiable (`layer_norm_train`, for training). On CUDA each direction is one kernel (plus a
//! small fixed-order reduction of the weight and bias gradients); the training op's CPU path
//! computes the same function over row blocks in parallel, accumulating in f64.
use super::saved::Saved;
use candle_core::backend::BackendStorage;
use candle_core::{
    CpuStorage, CustomOp3, DType, Device, Layout, Result, Storage, Tensor, WithDType,
};
use runtime::{cpu_fwd, cuda_fwd};
use std::sync::Mutex;

/// `(x - mean) / sqrt(var + eps) * weight + bias` over the last dimension of `x`.
pub fn layer_norm(x: &Tensor, weight: &Tensor, bias: &Tensor, eps: f32) -> Result<Tensor> {
    let d = x.dim(candle_core::D::Minus1)?;
    if weight.dims() != [d] || bias.dims() != [d] {
        return Err(candle_core::Error::Msg(format!(
            "layer_norm: input {:?}, weight {:?}, bias {:?} do not fit",
            x.dims(),
            weight.dims(),
            bias.dims()
        )));
    }
    #[cfg(feature = "cuda")]
    if x.device().is_cuda()
        && matches!(
            x.dtype(),
            candle_core::DType::F32 | candle_core::DType::BF16 | candle_core::DType::F16
        )
        && weight.dtype() == x.dtype()
        && bias.dtype() == x.dtype()
    {
        let rows = x.elem_count() / d.max(1);
        let y = super::cuda::layer_norm::layer_norm(
            &x.contiguous()?.reshape((rows, d))?,
            &weight.contiguous()?,
            &bias.contiguous()?,
            eps,
        )?;
        return y.reshape(x.dims());
    }
    // Two passes in f32 (mean, then the centred variance), like the CUDA kernel; candle's fused
    // CPU op takes E[x²] - E[x]², which loses digits when a row's mean is large.
    let dtype = x.dtype();
    let x = x.to_dtype(candle_core::DType::F32)?;
    let centred = x.broadcast_sub(&x.mean_keepdim(candle_core::D::Minus1)?)?;
    let var = centred.sqr()?.mean_keepdim(candle_core::D::Minus1)?;
    centred
        .broadcast_div(&(var + eps as f64)?.sqrt()?)?
        .broadcast_mul(&weight.to_dtype(candle_core::DType::F32)?)?
        .broadcast_add(&bias.to_dtype(candle_core::DType::F32)?)?
        .to_dtype(dtype)
}

/// Layer norm over the last dimension, differentiable with respect to `x`, `weight` and `bias`:
/// `(x - mean) / sqrt(var + eps) * weight + bias` with the variance of the centred row (two passes).
/// `weight` and `bias` are [d] for `x` [..., d], all of one dtype (f32, bf16 or f16 on CUDA; also
/// f64 on the CPU) and on one device. The forward keeps each row's mean and 1 / sqrt(var + eps)
/// for the backward (8 bytes a row on CUDA), held as long as the graph holds `y`.
pub fn layer_norm_train(x: &Tensor, weight: &Tensor, bias: &Tensor, eps: f32) -> Result<Tensor> {
    let fail = |why: &str| {
        Err(candle_core::Error::Msg(format!(
            "layer_norm_train: {why} (input {:?} {:?}, weight {:?} {:?}, bias {:?} {:?})",
            x.dims(),
            x.dtype(),
            weight.dims(),
            weight.dtype(),
            bias.dims(),
            bias.dtype()
        )))
    };
    let Some(&d) = x.dims().last() else {
        return fail("the input needs at least one dimension");
    };
    if d == 0 {
        return fail("the last dimension is empty");
    }
    if weight.dims() != [d] || bias.dims() != [d] {
        return fail("weight and bias must be [d] for an input [..., d]");
    }
    if weight.dtype() != x.dtype() || bias.dtype() != x.dtype() {
        return fail("input, weight and bias must share one dtype");
    }
    if !x.device().same_device(weight.device()) || !x.device().same_device(bias.device()) {
        return fail("input, weight and bias must be on one device");
    }
    let rows = x.elem_count() / d;
    let op = LayerNormTrain {
        eps,
        stats: Saved::empty(),
    };
    x.contiguous()?
        .reshape((rows, d))?
        .apply_op3(&weight.contiguous()?, &bias.contiguous()?, op)?
        .reshape(x.dims())
}

/// Each row's mean and 1 / sqrt(var + eps), as the forward computed them: f64 on the CPU, f32 on
/// CUDA, [rows] each.
#[derive(Clone)]
struct RowStats {
    mean: Tensor,
    rstd: Tensor,
}

/// The training layer norm on `x` [rows, d] (contiguous), `weight` and `bias` [d].
struct LayerNormTrain {
    eps: f32,
    /// Written by the forward, read by the backward.
    stats: Saved<RowStats>,
}

impl CustomOp3 for LayerNormTrain {
    fn name(&self) -> &'static str {
        "layer_norm_train"
    }

    cpu_fwd!(|op, (x, xl), (w, wl), (b, bl)| {
        fn run<T: WithDType>(
            op: &LayerNormTrain,
            x: (&CpuStorage, &Layout),
            w: (&CpuStorage, &Layout),
            b: (&CpuStorage, &Layout),
        ) -> Result<CpuStorage> {
            let d = w.1.shape().elem_count();
            let (y, mean, rstd) = cpu::forward(
                contiguous::<T>(x.0, x.1)?,
                contiguous::<T>(w.0, w.1)?,
                contiguous::<T>(b.0, b.1)?,
                d,
                op.eps,
            );
            let rows = mean.len();
            op.stats.keep(RowStats {
                mean: Tensor::from_vec(mean, rows, &Device::Cpu)?,
                rstd: Tensor::from_vec(rstd, rows, &Device::Cpu)?,
            });
            Ok(T::to_cpu_storage_owned(y))
        }
        let args = ((x, xl), (w, wl), (b, bl));
        let y = match x.dtype() {
            DType::F32 => run::<f32>(op, args.0, args.1, args.2)?,
            DType::F64 => run::<f64>(op, args.0, args.1, args.2)?,
            DType::BF16 => run::<half::bf16>(op, args.0, args.1, args.2)?,
            DType::F16 => run::<half::f16>(op, args.0, args.1, args.2)?,
            other => {
                return Err(candle_core::Error::UnsupportedDTypeForOp(
                    other,
                    "layer_norm_train",
                ))
            }
        };
        Ok((y, xl.shape().clone()))
    });

    cuda_fwd!(|op, (x, xl), (w, wl), (b, bl)| {
        let (y, mean, rstd) =
            super::cuda::layer_norm::forward_with_stats((x, xl), (w, wl), (b, bl), op.eps)?;
        op.stats.keep(RowStats { mean, rstd });
        Ok((y, xl.shape().clone()))
    });

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _b: &Tensor,
        _y: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let stats = self.stats.get("layer_norm_train")?;
        let dy = dy.contiguous()?;
        #[cfg(feature = "cuda")]
        if x.device().is_cuda() {
            let (dx, dw, db) =
                super::cuda::layer_norm::backward(x, w, &dy, &stats.mean, &stats.rstd)?;
            return Ok((Some(dx), Some(dw), Some(db)));
        }
        let (dx, dw, db) = match x.dtype() {
            DType::F32 => cpu::backward_tensors::<f32>(x, w, &dy, &stats)?,
            DType::F64 => cpu::backward_tensors::<f64>(x, w, &dy, &stats)?,
            DType::BF16 => cpu::backward_tensors::<half::bf16>(x, w, &dy, &stats)?,
            DType::F16 => cpu::backward_tensors::<half::f16>(x, w, &dy, &stats)?,
            other => {
                return Err(candle_core::Error::UnsupportedDTypeForOp(
                    other,
                    "layer_norm_train",
                ))
            }
        };
        Ok((Some(dx), Some(dw), Some(db)))
    }
}

/// The elements of a contiguous CPU storage that a layout covers.
fn contiguous<'a, T: WithDType>(s: &'a CpuStorage, l: &Layout) -> Result<&'a [T]> {
    let (start, end) = l.contiguous_offsets().ok_or_else(|| {
        candle_core::Error::Msg("layer_norm_train: expected a contiguous tensor".into())
    })?;
    Ok(&s.as_slice::<T>()?[start..end])
}

/// The CPU path: blocks of rows in parallel, statistics and sums in f64.
mod cpu {
    use super::*;

    /// Rows per parallel task: enough work to pay for the hand-off. It depends on `d` only, so the
    /// weight and bias gradients (per-task partial sums added in task order) are the same on any
    /// number of threads.
    fn rows_per_task(d: usize) -> usize {
        (16_384 / d).max(1)
    }

    /// `f` of every task, in task order, computed on candle's CPU worker pool: the pool of the
    /// element-wise ops that run just before and after a layer norm, so that no second pool's
    /// threads spin for the same cores between them.
    fn run_tasks<I: Send, R: Send>(tasks: Vec<I>, f: impl Fn(I) -> R + Sync) -> Vec<R> {
        if tasks.len() <= 1 {
            return tasks.into_iter().map(f).collect();
        }
        let slots: Vec<Mutex<(Option<I>, Option<R>)>> = tasks
            .into_iter()
            .map(|t| Mutex::new((Some(t), None)))
            .collect();
        candle_core::utils::barrier_pool().execute_chunked(slots.len(), |range| {
            for slot in &slots[range] {
                let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(task) = slot.0.take() {
                    slot.1 = Some(f(task));
                }
            }
        });
        slots
            .into_iter()
            .filter_map(|s| s.into_inner().unwrap_or_else(|e| e.into_inner()).1)
            .collect()
    }

    fn widen<T: WithDType>(v: &[T]) -> Vec<f64> {
        v.iter().map(|x| x.to_f64()).collect()
    }

    /// y, and each row's mean and 1 / sqrt(var + eps).
    pub(super) fn forward<T: WithDType>(
        x: &[T],
        w: &[T],
        b: &[T],
        d: usize,
        eps: f32,
    ) -> (Vec<T>, Vec<f64>, Vec<f64>) {
        let rows = x.len() / d;
        let (w, b) = (widen(w), widen(b));
        let mut y = vec![T::zero(); x.len()];
        let mut mean = vec![0.0; rows];
        let mut rstd = vec![0.0; rows];
        let per_task = rows_per_task(d);
        let tasks: Vec<_> = y
            .chunks_mut(per_task * d)
            .zip(x.chunks(per_task * d))
            .zip(mean.chunks_mut(per_task).zip(rstd.chunks_mut(per_task)))
            .collect();
        run_tasks(tasks, |((yc, xc), (mc, rc))| {
            let rows = yc.chunks_mut(d).zip(xc.chunks(d));
            for ((yr, xr), (m, r)) in rows.zip(mc.iter_mut().zip(rc.iter_mut())) {
                let mu = xr.iter().map(|v| v.to_f64()).sum::<f64>() / d as f64;
                let var = xr.iter().map(|v| (v.to_f64() - mu).powi(2)).sum::<f64>() / d as f64;
                let rs = 1.0 / (var + eps as f64).sqrt();
                for (((yv, xv), wv), bv) in yr.iter_mut().zip(xr).zip(&w).zip(&b) {
                    *yv = T::from_f64((xv.to_f64() - mu) * rs * wv + bv);
                }
                *m = mu;
                *r = rs;
            }
        });
        (y, mean, rstd)
    }

    /// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w and xhat = (x - mean) *
    /// rstd; dweight = column sums of dy * xhat, dbias = column sums of dy.
    pub(super) fn backward<T: WithDType>(
        x: &[T],
        w: &[T],
        dy: &[T],
        mean: &[f64],
        rstd: &[f64],
    ) -> (Vec<T>, Vec<T>, Vec<T>) {
        let d = w.len();
        let w = widen(w);
        let per_task = rows_per_task(d);
        let mut dx = vec![T::zero(); x.len()];
        let tasks: Vec<_> = dx
            .chunks_mut(per_task * d)
            .zip(x.chunks(per_task * d))
            .zip(dy.chunks(per_task * d))
            .zip(mean.chunks(per_task).zip(rstd.chunks(per_task)))
            .collect();
        let partials = run_tasks(tasks, |(((dxc, xc), dyc), (mc, rc))| {
            let mut sums = vec![0.0; 2 * d];
            let (mut xh, mut g) = (vec![0.0; d], vec![0.0; d]);
            let rows = dxc.chunks_mut(d).zip(xc.chunks(d)).zip(dyc.chunks(d));
            for (((dxr, xr), dyr), (&mu, &rs)) in rows.zip(mc.iter().zip(rc)) {
                let (mut sg, mut sgx) = (0.0, 0.0);
                let (dw, db) = sums.split_at_mut(d);
                let cols = xh.iter_mut().zip(g.iter_mut()).zip(xr.iter().zip(dyr));
                for (((xhv, gv), (xv, dyv)), ((wv, dwv), dbv)) in
                    cols.zip(w.iter().zip(dw.iter_mut()).zip(db.iter_mut()))
                {
                    let dyv = dyv.to_f64();
                    *xhv = (xv.to_f64() - mu) * rs;
                    *gv = dyv * wv;
                    sg += *gv;
                    sgx += *gv * *xhv;
                    *dwv += dyv * *xhv;
                    *dbv += dyv;
                }
                let (mg, mgx) = (sg / d as f64, sgx / d as f64);
                for ((dxv, gv), xhv) in dxr.iter_mut().zip(&g).zip(&xh) {
                    *dxv = T::from_f64(rs * (gv - mg - xhv * mgx));
                }
            }
            sums
        });
        let mut sums = vec![0.0; 2 * d];
        for p in &partials {
            for (s, v) in sums.iter_mut().zip(p) {
                *s += v;
            }
        }
        let narrow = |v: &[f64]| v.iter().map(|x| T::from_f64(*x)).collect::<Vec<T>>();
        (dx, narrow(&sums[..d]), narrow(&sums[d..]))
    }

    fn cpu_slice<'a, T: WithDType>(s: &'a Storage, l: &Layout) -> Result<&'a [T]> {
        match s {
            Storage::Cpu(cs) => contiguous::<T>(cs, l),
            _ => Err(candle_core::Error::Msg(
                "layer_norm_train backward: expected CPU tensors".into(),
            )),
        }
    }

    /// [`backward`] on tensors: `x` and `dy` [rows, d], `w` [d], contiguous, of dtype `T`.
    pub(super) fn backward_tensors<T: WithDType>(
        x: &Tensor,
        w: &Tensor,
        dy: &Tensor,
        stats: &RowStats,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let (rows, d) = x.dims2()?;
        let (xs, xl) = x.storage_and_layout();
        let (ws, wl) = w.storage_and_layout();
        let (dys, dyl) = dy.storage_and_layout();
        let (ms, ml) = stats.mean.storage_and_layout();
        let (rs, rl) = stats.rstd.storage_and_layout();
        let (dx, dw, db) = backward(
            cpu_slice::<T>(&xs, xl)?,
            cpu_slice::<T>(&ws, wl)?,
            cpu_slice::<T>(&dys, dyl)?,
            cpu_slice::<f64>(&ms, ml)?,
            cpu_slice::<f64>(&rs, rl)?,
        );
        Ok((
            Tensor::from_vec(dx, (rows, d), &Device::Cpu)?,
            Tensor::from_vec(dw, d, &Device::Cpu)?,
            Tensor::from_vec(db, d, &Device::Cpu)?,
        ))
    }
}
