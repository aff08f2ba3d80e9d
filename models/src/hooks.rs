//! Reading and patching the stream at hook points during one forward pass.
use crate::error::Result;
use candle_core::Tensor;
use gpt2::{HookPoint, Patch};

/// The hooks read and the patches applied in one forward pass.
pub struct Visitor<'a, 'p> {
    hooks: &'a [HookPoint],
    patches: &'a [(HookPoint, Patch<'p>)],
    captured: Vec<Option<Tensor>>,
    depth: usize,
}

impl<'a, 'p> Visitor<'a, 'p> {
    /// Checks every point against the model's `n_layer` and works out how many blocks must run:
    /// all of them for logits, else up to the deepest hook.
    pub fn new(
        hooks: &'a [HookPoint],
        patches: &'a [(HookPoint, Patch<'p>)],
        n_layer: usize,
        want_logits: bool,
    ) -> Result<Self> {
        for h in hooks.iter().chain(patches.iter().map(|(h, _)| h)) {
            h.validate(n_layer)?;
        }
        let depth = if want_logits {
            n_layer
        } else {
            hooks
                .iter()
                .map(|h| h.blocks_needed(n_layer))
                .max()
                .unwrap_or(0)
        };
        Ok(Self {
            hooks,
            patches,
            captured: vec![None; hooks.len()],
            depth,
        })
    }

    pub fn hooks(&self) -> &'a [HookPoint] {
        self.hooks
    }

    pub fn patches(&self) -> &'a [(HookPoint, Patch<'p>)] {
        self.patches
    }

    /// The hooks' activations, in request order, from a model that ran them itself.
    pub fn fill(&mut self, captured: Vec<Tensor>) {
        self.captured = captured.into_iter().map(Some).collect();
    }

    /// Blocks to run.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Whether the final norm must run (logits, or `ln_final` read).
    pub fn needs_final(&self, want_logits: bool, n_layer: usize) -> bool {
        self.depth == n_layer && (want_logits || self.hooks.contains(&HookPoint::LnFinal))
    }

    /// The stream at `point` after the patches there; captured if a hook reads it.
    pub fn visit(&mut self, point: HookPoint, x: Tensor) -> Result<Tensor> {
        let mut x = x;
        for (p, f) in self.patches {
            if *p == point {
                x = f(&x)?;
            }
        }
        for (slot, h) in self.captured.iter_mut().zip(self.hooks) {
            if *h == point {
                *slot = Some(x.clone());
            }
        }
        Ok(x)
    }

    /// The captured activations in request order; an error names a hook the pass did not reach.
    pub fn finish(self) -> Result<Vec<Tensor>> {
        self.captured
            .into_iter()
            .zip(self.hooks)
            .map(|(c, h)| {
                c.ok_or_else(|| {
                    gpt2::Error::HookPoint(format!("{h}: not reached in the forward pass")).into()
                })
            })
            .collect()
    }
}
