//! Top-k of an accumulation: `acc = residual + g` over a list of tensors laid end to end in one
//! flat residual (error feedback), updated in place and selected in the same call.
//!
//! With DGC momentum correction the addend is the velocity: `u = μ·u + g` (one fused multiply-add),
//! then `acc = residual + u`. Both devices round the same way (one rounding per operation), so they
//! compute bit-identical accumulations and hence the same selection.
//!
//! On CUDA, Prof-K's first attempt is fused with the update: the threshold is sampled from `acc`
//! computed on the fly at the sampled positions, and one pass reads every gradient and the
//! residual, writes `acc` back and keeps the candidates: one read of g, one read and one write of
//! the residual. A redraw or the exact fallback runs on the updated residual, so no gradient is
//! added twice. No flat copy of the gradients is made on either device.
//!
//! After the call the residual holds `acc` even when the call fails with a NaN error (the error
//! names the first NaN coordinate of `acc`).
use crate::select::{self, Plan, TopK};
use crate::{Error, Mode, Result, Selector, TopKOptions};
use candle_core::{CpuStorage, DType, Device, Layout, Tensor};

/// Where each gradient lives in the flat residual: the tensors in order, end to end.
pub struct FlatSpans {
    /// Start of each span, then the total.
    starts: Vec<u64>,
    /// The chunk table on the device, built on first use.
    #[cfg(feature = "cuda")]
    pub(crate) device: std::sync::Mutex<Option<crate::cuda::accumulate::Table>>,
}

impl std::fmt::Debug for FlatSpans {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlatSpans")
            .field("spans", &self.len())
            .field("total", &self.total())
            .finish()
    }
}

impl FlatSpans {
    /// Spans of the given lengths, in order, starting at 0.
    pub fn new(lens: impl IntoIterator<Item = usize>) -> Self {
        let mut starts = vec![0u64];
        for len in lens {
            starts.push(starts[starts.len() - 1] + len as u64);
        }
        Self {
            starts,
            #[cfg(feature = "cuda")]
            device: std::sync::Mutex::new(None),
        }
    }

    /// Number of spans (gradient tensors).
    pub fn len(&self) -> usize {
        self.starts.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Coordinates over all spans: the residual's length.
    pub fn total(&self) -> usize {
        self.starts[self.starts.len() - 1] as usize
    }

    /// Start of each span, then the total.
    pub fn starts(&self) -> &[u64] {
        &self.starts
    }

    fn span_len(&self, i: usize) -> usize {
        (self.starts[i + 1] - self.starts[i]) as usize
    }
}

/// One step's accumulation: `residual += g` (or `u = μ·u + g; residual += u`) for every span.
pub struct Accumulation<'a> {
    /// Flat f32 residual of [`FlatSpans::total`] coordinates, updated in place.
    pub residual: &'a Tensor,
    /// One gradient per span, any shape with the span's element count; f16/bf16/f64 are converted
    /// to f32. `None`: nothing to add, the span's gradient is already in the residual (a backward
    /// pass that accumulates into it, `gpt2::ops::sink_gradients`) or it has none; the pass
    /// then only reads the residual there. Needs no velocity (momentum correction adds to it
    /// first).
    pub grads: &'a [Option<Tensor>],
    /// DGC velocity (flat f32, like the residual), updated in place; `None` adds the gradients.
    pub velocity: Option<&'a Tensor>,
    /// μ of the momentum correction (ignored without a velocity).
    pub momentum: f32,
}

/// Adds the step's gradients into the residual (and velocity), without selecting.
pub fn accumulate(spans: &FlatSpans, acc: &Accumulation) -> Result<()> {
    let grads = validate(spans, acc)?;
    match acc.residual.device() {
        Device::Cpu => add_cpu(spans, acc, &grads),
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => crate::cuda::accumulate::add(spans, acc, &grads),
        other => Err(unsupported(other)),
    }
}

/// Updates the residual and returns the exact top `k` of it (flat indices, one selection over all
/// spans) in one call; `opts.mode` is ignored. Values are the updated residual's at the indices.
pub fn topk_accumulate(
    spans: &FlatSpans,
    acc: &Accumulation,
    k: usize,
    opts: &TopKOptions,
) -> Result<TopK> {
    let n = spans.total();
    let plan = match acc.residual.device() {
        Device::Cpu => select::cpu_plan_for(n, k.min(n), opts.eps)?,
        _ => select::gpu_plan_for(n, k.min(n), opts.eps, 1)?,
    };
    run(spans, acc, k, opts, plan)
}

/// [`topk_accumulate`] with explicit Prof-K parameters (tests and benchmarks: a poor plan forces
/// the redraw or the fallback). `plan.sample` must lie in `[1, n]`.
pub fn topk_accumulate_with_plan(
    spans: &FlatSpans,
    acc: &Accumulation,
    k: usize,
    opts: &TopKOptions,
    plan: Plan,
) -> Result<TopK> {
    let n = spans.total() as u64;
    if plan.sample == 0 || plan.sample > n || plan.t == 0 || plan.t > plan.sample {
        return Err(Error::Param(format!(
            "plan {plan:?} needs 1 <= t <= sample <= n = {n}"
        )));
    }
    run(spans, acc, k, opts, (k > 0).then_some(plan))
}

fn run(
    spans: &FlatSpans,
    acc: &Accumulation,
    k: usize,
    opts: &TopKOptions,
    plan: Option<Plan>,
) -> Result<TopK> {
    let opts = TopKOptions {
        mode: Mode::Flat,
        ..opts.clone()
    };
    let n = spans.total();
    if k > n {
        return Err(Error::KTooLarge { k, n });
    }
    if !(opts.eps > 0.0 && opts.eps < 1.0) {
        return Err(Error::Param(format!(
            "eps = {} must lie strictly between 0 and 1",
            opts.eps
        )));
    }
    let grads = validate(spans, acc)?;
    let plan = if opts.selector == Selector::Profk {
        plan
    } else {
        None
    };
    match acc.residual.device() {
        Device::Cpu => {
            add_cpu(spans, acc, &grads)?;
            select::topk_on_plan(acc.residual, k, &opts, plan)
        }
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => crate::cuda::accumulate::topk(spans, acc, &grads, k, &opts, plan),
        other => Err(unsupported(other)),
    }
}

fn unsupported(device: &Device) -> Error {
    Error::Param(format!(
        "accumulation runs on the CPU or CUDA, not {device:?}"
    ))
}

/// Checks the residual, velocity and gradients against the spans; returns the gradients as flat
/// contiguous f32 tensors (no copy for contiguous f32 gradients).
fn validate(spans: &FlatSpans, acc: &Accumulation) -> Result<Vec<Option<Tensor>>> {
    let n = spans.total();
    let state = |name: &str, t: &Tensor| -> Result<()> {
        if t.dtype() != DType::F32 {
            return Err(Error::Param(format!(
                "the {name} must be f32, not {:?}",
                t.dtype()
            )));
        }
        if t.dims() != [n] || !t.is_contiguous() {
            return Err(Error::Shape {
                shape: t.dims().to_vec(),
                reason: format!(
                    "the {name} must be one contiguous vector of the {n} coordinates of the spans"
                ),
            });
        }
        Ok(())
    };
    state("residual", acc.residual)?;
    if let Some(u) = acc.velocity {
        state("velocity", u)?;
        if !u.device().same_device(acc.residual.device()) {
            return Err(Error::Param(
                "velocity and residual live on different devices".into(),
            ));
        }
    }
    if acc.grads.len() != spans.len() {
        return Err(Error::Param(format!(
            "{} gradients for {} spans",
            acc.grads.len(),
            spans.len()
        )));
    }
    if acc.velocity.is_some() && acc.grads.iter().any(Option::is_none) {
        return Err(Error::Param(
            "momentum correction needs every span's gradient (a span without one has a velocity to update)"
                .into(),
        ));
    }
    acc.grads
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let Some(g) = g else { return Ok(None) };
            if g.elem_count() != spans.span_len(i) {
                return Err(Error::Shape {
                    shape: g.dims().to_vec(),
                    reason: format!(
                        "gradient {i} has {} elements, its span {}",
                        g.elem_count(),
                        spans.span_len(i)
                    ),
                });
            }
            if !g.device().same_device(acc.residual.device()) {
                return Err(Error::Param(format!(
                    "gradient {i} lives on another device than the residual"
                )));
            }
            // An empty gradient is never read (and CUDA launches no cast over zero elements).
            if g.elem_count() == 0 {
                return Ok(None);
            }
            Ok(Some(g.flatten_all()?.to_dtype(DType::F32)?.contiguous()?))
        })
        .collect()
}

/// The in-place updates of the CPU accumulation.
enum Update {
    /// `dst = dst + src`.
    Add,
    /// `dst = μ·dst + src` (one fused multiply-add, as on CUDA).
    Momentum(f32),
}

fn f32_slices<'a>(
    dst: &'a mut CpuStorage,
    dl: &Layout,
    src: &'a CpuStorage,
    sl: &Layout,
) -> candle_core::Result<(&'a mut [f32], &'a [f32])> {
    let (CpuStorage::F32(d), CpuStorage::F32(s)) = (dst, src) else {
        candle_core::bail!("accumulation expects f32 storage");
    };
    let (Some((d0, d1)), Some((s0, s1))) = (dl.contiguous_offsets(), sl.contiguous_offsets())
    else {
        candle_core::bail!("accumulation expects contiguous tensors");
    };
    Ok((&mut d[d0..d1], &s[s0..s1]))
}

impl candle_core::InplaceOp2 for Update {
    fn name(&self) -> &'static str {
        match self {
            Update::Add => "profk-add-assign",
            Update::Momentum(_) => "profk-momentum",
        }
    }

    fn cpu_fwd(
        &self,
        dst: &mut CpuStorage,
        dl: &Layout,
        src: &CpuStorage,
        sl: &Layout,
    ) -> candle_core::Result<()> {
        let (d, s) = f32_slices(dst, dl, src, sl)?;
        let pairs = d.iter_mut().zip(s);
        match *self {
            Update::Add => pairs.for_each(|(x, y)| *x += y),
            Update::Momentum(mu) => pairs.for_each(|(u, g)| *u = mu.mul_add(*u, *g)),
        }
        Ok(())
    }
}

fn add_cpu(spans: &FlatSpans, acc: &Accumulation, grads: &[Option<Tensor>]) -> Result<()> {
    for (i, g) in grads.iter().enumerate() {
        let Some(g) = g else { continue };
        let (start, len) = (spans.starts[i] as usize, spans.span_len(i));
        if len == 0 {
            continue;
        }
        let r = acc.residual.narrow(0, start, len)?;
        match acc.velocity {
            None => r.inplace_op2(g, &Update::Add)?,
            Some(velocity) => {
                let u = velocity.narrow(0, start, len)?;
                u.inplace_op2(g, &Update::Momentum(acc.momentum))?;
                r.inplace_op2(&u, &Update::Add)?;
            }
        }
    }
    Ok(())
}
