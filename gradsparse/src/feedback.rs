//! Error feedback: the part of the gradient not applied this step is carried to the next.
//!
//! Per step: `u = μ·u + g` (only with momentum correction, DGC), `r += u` (or `r += g`), select the top
//! of `|r|`, hand the selected values to the optimizer and zero them in `r` (and in `u`: DGC's momentum
//! factor masking). So after every step, `r + Σ applied = Σ accumulated` holds exactly, coordinate by
//! coordinate: nothing is lost, only delayed.
//!
//! The residual is one flat f32 buffer over all parameters, laid out by [`FlatLayout`]. Gradients are
//! added into it in place, tensor by tensor (`profk::accumulate`: one launch for all parameters on
//! CUDA), so a global selection runs on one tensor without ever concatenating the gradients into a
//! fresh buffer. [`ErrorFeedback::accumulate_select`] goes further for a global Prof-K selection: the
//! update is fused into the selection's pass (`profk::topk_accumulate`), so a step reads each gradient
//! once and the residual once, and writes the residual once.
use crate::error::{Error, Result};
use crate::flatops;
use crate::layout::FlatLayout;
use crate::select::{self, k_for, Scope, Selection, SelectorChoice};
use candle_core::{DType, Device, Tensor};
use profk::{Accumulation, FlatSpans, Selector};
use std::time::{Duration, Instant};

/// Residual (and velocity) state of error feedback.
#[derive(Debug)]
pub struct ErrorFeedback {
    layout: FlatLayout,
    spans: FlatSpans,
    residual: Tensor,
    velocity: Option<Tensor>,
    momentum: f64,
}

impl ErrorFeedback {
    /// Zero state; `momentum = Some(μ)` turns on DGC momentum correction.
    pub fn new(layout: FlatLayout, momentum: Option<f64>, device: &Device) -> Result<Self> {
        let n = layout.total();
        let residual = Tensor::zeros(n, DType::F32, device)?;
        let velocity = momentum
            .map(|_| Tensor::zeros(n, DType::F32, device))
            .transpose()?;
        Ok(Self {
            spans: FlatSpans::new(layout.spans().iter().map(|s| s.len)),
            layout,
            residual,
            velocity,
            momentum: momentum.unwrap_or(0.0),
        })
    }

    pub fn layout(&self) -> &FlatLayout {
        &self.layout
    }

    /// The flat residual `r` (after `accumulate`, the accumulated gradient that selection ranks).
    pub fn residual(&self) -> &Tensor {
        &self.residual
    }

    /// The flat DGC velocity `u`, when momentum correction is on.
    pub fn velocity(&self) -> Option<&Tensor> {
        self.velocity.as_ref()
    }

    /// Adds this step's gradients (one per span, in layout order; None: nothing to add, e.g. a gradient
    /// the backward pass already added through a sink, see [`Self::sinks`]) into the residual.
    pub fn accumulate(&mut self, grads: &[Option<Tensor>]) -> Result<()> {
        self.check_grads(grads)?;
        profk::accumulate(&self.spans, &self.accumulation(grads))?;
        Ok(())
    }

    /// [`Self::accumulate`] then [`Self::select`], fused into one pass for a global Prof-K selection;
    /// the selection's `accumulate` time is that of the separate update (zero when fused).
    pub fn accumulate_select(
        &mut self,
        grads: &[Option<Tensor>],
        density: f64,
        scope: Scope,
        choice: &SelectorChoice,
        step: u64,
    ) -> Result<Selection> {
        let device = self.residual.device().clone();
        device.synchronize()?;
        let start = Instant::now();
        if scope != Scope::Global || choice.kind != Selector::Profk {
            self.accumulate(grads)?;
            device.synchronize()?;
            let accumulate = start.elapsed();
            let mut selection = self.select(density, scope, choice, step)?;
            selection.accumulate = accumulate;
            return Ok(selection);
        }
        self.check_grads(grads)?;
        let k = k_for(density, self.layout.total());
        let top = profk::topk_accumulate(
            &self.spans,
            &self.accumulation(grads),
            k,
            &select::options(choice.kind),
        )?;
        device.synchronize()?;
        let selection = Selection {
            indices: top.indices,
            values: top.values,
            time: start.elapsed(),
            compare_time: None,
            accumulate: Duration::ZERO,
        };
        select::cross_checked(selection, choice, step, |other| {
            select::timed(&self.residual, &self.layout, density, scope, other)
        })
    }

    fn accumulation<'a>(&'a self, grads: &'a [Option<Tensor>]) -> Accumulation<'a> {
        Accumulation {
            residual: &self.residual,
            grads,
            velocity: self.velocity.as_ref(),
            momentum: self.momentum as f32,
        }
    }

    /// One gradient per parameter, each with its parameter's element count.
    fn check_grads(&self, grads: &[Option<Tensor>]) -> Result<()> {
        if grads.len() != self.layout.spans().len() {
            return Err(Error::Param {
                name: "<gradients>".into(),
                message: format!(
                    "{} gradients for {} parameters",
                    grads.len(),
                    self.layout.spans().len()
                ),
            });
        }
        for (span, grad) in self.layout.spans().iter().zip(grads) {
            let Some(grad) = grad else { continue };
            if grad.elem_count() != span.len {
                return Err(Error::Param {
                    name: span.name.clone(),
                    message: format!(
                        "gradient has shape {:?}, parameter {:?}",
                        grad.dims(),
                        span.shape.dims()
                    ),
                });
            }
        }
        Ok(())
    }

    /// Selects the top `density` of `|r|` in `scope`.
    pub fn select(
        &self,
        density: f64,
        scope: Scope,
        choice: &SelectorChoice,
        step: u64,
    ) -> Result<Selection> {
        select::select(&self.residual, &self.layout, density, scope, choice, step)
    }

    /// Removes the selected coordinates from the residual (and velocity): they are being applied.
    pub fn release(&mut self, selection: &Selection) -> Result<()> {
        flatops::zero_at(&self.residual, &selection.indices)?;
        if let Some(velocity) = &self.velocity {
            flatops::zero_at(velocity, &selection.indices)?;
        }
        Ok(())
    }

    /// Zeroes the residual (and velocity): everything was applied.
    pub fn clear(&mut self) -> Result<()> {
        self.residual.zero_set()?;
        if let Some(velocity) = &self.velocity {
            velocity.zero_set()?;
        }
        Ok(())
    }

    /// Replaces the state with saved buffers (checked against the layout).
    pub fn restore(&mut self, residual: Tensor, velocity: Option<Tensor>) -> Result<()> {
        let n = self.layout.total();
        let device = self.residual.device().clone();
        let check = |name: &str, t: &Tensor| -> Result<Tensor> {
            if t.dims() != [n] {
                return Err(Error::Param {
                    name: name.into(),
                    message: format!("saved shape {:?}, expected [{n}]", t.dims()),
                });
            }
            Ok(t.to_dtype(DType::F32)?.to_device(&device)?.copy()?)
        };
        self.residual = check("residual", &residual)?;
        self.velocity = match (&self.velocity, velocity) {
            (Some(_), Some(v)) => Some(check("velocity", &v)?),
            (None, None) => None,
            (Some(_), None) => {
                return Err(Error::Param {
                    name: "velocity".into(),
                    message: "missing from the saved state".into(),
                })
            }
            (None, Some(_)) => {
                return Err(Error::Param {
                    name: "velocity".into(),
                    message: "saved with momentum correction, which the config turns off".into(),
                })
            }
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Var;

    /// Odd parameter sizes, over Prof-K's sampling threshold in total.
    fn layout() -> FlatLayout {
        let named: Vec<(String, Var)> = [
            ("a", vec![3, 1001]),
            ("b", vec![7]),
            ("c", vec![64, 129]),
            ("d", vec![1]),
        ]
        .into_iter()
        .map(|(n, s)| {
            (
                n.to_string(),
                Var::zeros(s, DType::F32, &Device::Cpu).unwrap(),
            )
        })
        .collect();
        FlatLayout::new(&named).unwrap()
    }

    fn grads(layout: &FlatLayout, step: u64, device: &Device) -> Vec<Option<Tensor>> {
        layout
            .spans()
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let seed = (step * 31 + i as u64) as f32;
                let v: Vec<f32> = (0..s.len)
                    .map(|j| ((j as f32 * 0.37 + seed).sin() * 3.0).round() / 4.0)
                    .collect();
                Some(Tensor::from_vec(v, s.shape.clone(), device).unwrap())
            })
            .collect()
    }

    fn flat(t: &Tensor) -> Vec<u32> {
        t.to_device(&Device::Cpu)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect()
    }

    /// Several steps of (accumulate, select, release) with the fused call and with the separate
    /// update: the same index sets, the same residual bit for bit (ties are heavy: quarter steps).
    fn fused_matches_separate(device: &Device) {
        for momentum in [None, Some(0.9)] {
            let layout = layout();
            let mut fused = ErrorFeedback::new(layout.clone(), momentum, device).unwrap();
            let mut separate = ErrorFeedback::new(layout.clone(), momentum, &Device::Cpu).unwrap();
            let choice = SelectorChoice {
                kind: Selector::Profk,
                compare_with: Some(Selector::Sort),
            };
            for step in 0..3 {
                let a = fused
                    .accumulate_select(
                        &grads(&layout, step, device),
                        0.01,
                        Scope::Global,
                        &choice,
                        step,
                    )
                    .unwrap();
                separate
                    .accumulate(&grads(&layout, step, &Device::Cpu))
                    .unwrap();
                let b = separate.select(0.01, Scope::Global, &choice, step).unwrap();
                let idx = |s: &Selection| {
                    s.indices
                        .to_device(&Device::Cpu)
                        .unwrap()
                        .to_vec1::<i64>()
                        .unwrap()
                };
                assert_eq!(idx(&a), idx(&b), "step {step}, momentum {momentum:?}");
                assert_eq!(
                    flat(fused.residual()),
                    flat(separate.residual()),
                    "step {step}"
                );
                fused.release(&a).unwrap();
                separate.release(&b).unwrap();
            }
        }
    }

    #[test]
    fn fused_matches_separate_cpu() {
        fused_matches_separate(&Device::Cpu);
    }

    /// The CUDA fused path against the CPU's separate update and selection.
    #[cfg(feature = "cuda")]
    #[test]
    fn fused_matches_separate_cuda() {
        fused_matches_separate(&Device::new_cuda(0).unwrap());
    }
}
