//! What a trained dictionary is measured by: the reconstruction's MSE and fraction of variance
//! unexplained, and next-token cross-entropy with the reconstruction spliced into the model (CE-loss
//! recovered), each a function of the model, the activations and a reconstruction, whatever
//! architecture produced it.

use crate::{Error, Result};
use candle_core::{DType, Tensor};
use gpt2::{HookPoint, Patch};
use models::Model;

/// Mean squared error per element and fraction of variance unexplained.
pub fn mse_fvu(x: &Tensor, recon: &Tensor) -> Result<(f64, f64)> {
    let err = (x - recon)?
        .sqr()?
        .to_dtype(DType::F64)?
        .sum_all()?
        .to_scalar::<f64>()?;
    let centered = x.broadcast_sub(&x.mean_keepdim(0)?)?;
    let var = centered
        .sqr()?
        .to_dtype(DType::F64)?
        .sum_all()?
        .to_scalar::<f64>()?;
    Ok((err / x.elem_count() as f64, err / var.max(1e-30)))
}

/// Next-token cross-entropy with the clean stream, with the SAE's reconstruction spliced in, and with the
/// stream zeroed where it was spliced.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CeLosses {
    pub clean: f64,
    pub spliced: f64,
    pub zero: f64,
}

impl CeLosses {
    /// (zero − spliced) / (zero − clean): 1 when the SAE loses nothing, 0 when it is as bad as zeroing.
    pub fn recovered(&self) -> f64 {
        (self.zero - self.spliced) / (self.zero - self.clean)
    }
}

/// CE losses of the splice at every hook point at once (`all`) and, with several hook points (a crosscoder),
/// of each hook point spliced alone, the others clean (`per_layer`, in the order of the hook points).
#[derive(Clone, Debug, PartialEq)]
pub struct CeSplices {
    pub all: CeLosses,
    pub per_layer: Vec<CeLosses>,
}

/// What a reconstruction function may fail with (its own crate's error, boxed).
pub type ReconstructError = Box<dyn std::error::Error + Send + Sync>;

/// A reconstruction of raw activations [N, L, d] (a token per row, a hook point per layer), as [N, L, d].
pub type Reconstruct<'a> = &'a dyn Fn(&Tensor) -> std::result::Result<Tensor, ReconstructError>;

/// CE-loss recovered with `reconstruct` spliced in, the way crosscoders are evaluated: one clean forward
/// gives the activations at every hook point, `reconstruct` maps them (positions 1..) to each layer's
/// reconstruction, and one forward replaces the stream at every hook point by its layer's reconstruction
/// (another zeroes every hook point). For one hook point this is the single-layer SAE splice.
pub fn ce_splices(
    model: &Model,
    tokens: &Tensor,
    hooks: &[HookPoint],
    reconstruct: Reconstruct,
) -> Result<CeSplices> {
    let (b, t) = tokens.dims2()?;
    if hooks.is_empty() || t < 2 {
        return Err(Error::Shape(format!(
            "CE-loss recovered needs a hook point and contexts of ≥ 2 tokens, got {} hook points and \
             {t} tokens",
            hooks.len()
        )));
    }
    let ce = |logits: Tensor| -> Result<f64> {
        Ok(Model::next_token_loss(&logits, tokens)?
            .to_dtype(DType::F64)?
            .to_scalar::<f64>()?)
    };
    let clean = ce(model.forward_logits(tokens)?)?;
    let acts = model.forward_hooks(tokens, hooks)?;
    let layers = hooks.len();
    let d = acts[0].dim(2)?;
    let body = acts
        .iter()
        .map(|a| a.narrow(1, 1, t - 1))
        .collect::<candle_core::Result<Vec<_>>>()?;
    let rows = b * (t - 1);
    let body = Tensor::stack(&body, 2)?.reshape((rows, layers, d))?;
    let recon = reconstruct(&body).map_err(Error::Reconstruct)?;
    if recon.dims() != [rows, layers, d] {
        return Err(Error::Shape(format!(
            "the reconstruction has shape {:?}, expected [{rows}, {layers}, {d}]",
            recon.dims()
        )));
    }
    let recon = recon
        .to_device(acts[0].device())?
        .to_dtype(acts[0].dtype())?
        .reshape((b, t - 1, layers, d))?;
    let layer_recon = (0..layers)
        .map(|l| recon.narrow(2, l, 1)?.squeeze(2))
        .collect::<candle_core::Result<Vec<_>>>()?;
    let put = |r: &Tensor| {
        let r = r.clone();
        move |h: &Tensor| Tensor::cat(&[&h.narrow(1, 0, 1)?, &r], 1)
    };
    let puts: Vec<_> = layer_recon.iter().map(put).collect();
    let zero_out = |h: &Tensor| h.zeros_like();
    let spliced_at: Vec<(HookPoint, Patch)> = hooks
        .iter()
        .zip(&puts)
        .map(|(h, p)| (*h, p as Patch))
        .collect();
    let zeroed_at: Vec<(HookPoint, Patch)> =
        hooks.iter().map(|h| (*h, &zero_out as Patch)).collect();
    let all = CeLosses {
        clean,
        spliced: ce(model.forward_logits_patched_many(tokens, &spliced_at)?)?,
        zero: ce(model.forward_logits_patched_many(tokens, &zeroed_at)?)?,
    };
    let per_layer = if layers > 1 {
        spliced_at
            .iter()
            .zip(&zeroed_at)
            .map(|(s, z)| {
                Ok(CeLosses {
                    clean,
                    spliced: ce(
                        model.forward_logits_patched_many(tokens, std::slice::from_ref(s))?
                    )?,
                    zero: ce(model.forward_logits_patched_many(tokens, std::slice::from_ref(z))?)?,
                })
            })
            .collect::<Result<Vec<_>>>()?
    } else {
        Vec::new()
    };
    Ok(CeSplices { all, per_layer })
}
