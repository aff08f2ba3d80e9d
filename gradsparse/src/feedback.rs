//! Error feedback: the part of the gradient not applied this step is carried to the next.
//!
//! Per step: `u = μ·u + g` (only with momentum correction, DGC), `r += u` (or `r += g`), select the top
//! of `|r|`, hand the selected values to the optimizer and zero them in `r` (and in `u`: DGC's momentum
//! factor masking). So after every step, `r + Σ applied = Σ accumulated` holds exactly, coordinate by
//! coordinate: nothing is lost, only delayed.
//!
//! The residual is one flat f32 buffer over all parameters, laid out by [`FlatLayout`]. Gradients are
//! added into it in place, tensor by tensor, so a global selection runs on one tensor without ever
//! concatenating the gradients into a fresh buffer: the per-step traffic is one read of each gradient
//! and one read-modify-write of the residual, the minimum without fusing the add into the selection.
//! (On CUDA one launch covers all parameters, see `crate::cuda`.)
use crate::error::{Error, Result};
use crate::flatops;
use crate::layout::FlatLayout;
use crate::select::{self, Scope, Selection, SelectorChoice};
use candle_core::{DType, Device, Tensor};

/// Residual (and velocity) state of error feedback.
#[derive(Debug)]
pub struct ErrorFeedback {
    layout: FlatLayout,
    residual: Tensor,
    velocity: Option<Tensor>,
    momentum: f64,
    #[cfg(feature = "cuda")]
    chunks: Option<crate::cuda::Chunks>,
}

impl ErrorFeedback {
    /// Zero state; `momentum = Some(μ)` turns on DGC momentum correction.
    pub fn new(layout: FlatLayout, momentum: Option<f64>, device: &Device) -> Result<Self> {
        let n = layout.total();
        let residual = Tensor::zeros(n, DType::F32, device)?;
        let velocity = momentum
            .map(|_| Tensor::zeros(n, DType::F32, device))
            .transpose()?;
        #[cfg(feature = "cuda")]
        let chunks = match device {
            Device::Cuda(d) => Some(crate::cuda::Chunks::new(&layout, &d.cuda_stream())?),
            _ => None,
        };
        Ok(Self {
            layout,
            residual,
            velocity,
            momentum: momentum.unwrap_or(0.0),
            #[cfg(feature = "cuda")]
            chunks,
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

    /// Adds this step's gradients (one per span, in layout order) into the residual.
    pub fn accumulate(&mut self, grads: &[Tensor]) -> Result<()> {
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
        #[cfg(feature = "cuda")]
        if let Some(chunks) = &self.chunks {
            let momentum = self.momentum as f32;
            return crate::cuda::accumulate(
                chunks,
                &self.residual,
                self.velocity.as_ref(),
                momentum,
                grads,
            );
        }
        for (span, grad) in self.layout.spans().iter().zip(grads) {
            match &self.velocity {
                None => flatops::add_into(&self.residual, span.offset, grad)?,
                Some(velocity) => {
                    let u = velocity.narrow(0, span.offset, span.len)?;
                    let u = ((u * self.momentum)? + grad.flatten_all()?.to_dtype(DType::F32)?)?;
                    flatops::copy_into(velocity, span.offset, &u)?;
                    flatops::add_into(&self.residual, span.offset, &u)?;
                }
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
