//! Acausal BatchTopK crosscoder (Lindsey et al. 2024) over L layers: each layer has its own encoder and
//! decoder, `pre = ReLU(Σ_l (x_l − b_dec,l)·W_enc,l + b_enc)`, one batch-global selection of B·k latents,
//! `recon_l = acts·W_dec,l + b_dec,l`, loss = mean over tokens of Σ_l ‖x_l − recon_l‖².
//!
//! The recipe: the trainer stacks the layers along the feature axis (x [B, L·d], W_enc [L·d, n],
//! W_dec [n, L·d]; [`crate::trainer::scale_and_stack`]), which makes the summed per-layer encoders one
//! matmul and the per-layer decoders one matmul; the selection and the decoder-norm constraint (each
//! latent's decoder, over all layers, has unit norm) see the latent as a whole, and on the stacked
//! layers the training forward pass is BatchTopK's ([`forward`]). It needs at least two layers
//! ([`validate`]) and reports the FVU of each ([`layer_fvu`]).
use crate::distributed::BatchShare;
use crate::model::{Forward, Sae};
use crate::{Error, Result};
use candle_core::Tensor;

/// The training forward pass on the stacked inputs `x` [B, L·d] (this rank's rows of a global batch
/// with `share`): BatchTopK's.
pub fn forward(
    sae: &Sae,
    x: &Tensor,
    selector: profk::Selector,
    seed: u64,
    share: Option<&BatchShare>,
) -> Result<Forward> {
    super::batchtopk::forward(sae, x, selector, seed, share)
}

/// `data.layers`: a crosscoder reads at least two.
pub fn validate(layers: usize) -> Result<()> {
    if layers < 2 {
        return Err(Error::config(
            "data.layers",
            format!("a crosscoder needs ≥ 2 layers, got {layers}"),
        ));
    }
    Ok(())
}

/// Fraction of variance unexplained per layer.
pub fn layer_fvu(x: &Tensor, recon: &Tensor, layers: usize) -> Result<Vec<f64>> {
    let (b, d_in) = x.dims2()?;
    let d = d_in / layers;
    let x = x.reshape((b, layers, d))?;
    let r = recon.reshape((b, layers, d))?;
    let err: Vec<f32> = (&x - &r)?.sqr()?.sum(2)?.sum(0)?.to_vec1()?;
    let var: Vec<f32> = x
        .broadcast_sub(&x.mean_keepdim(0)?)?
        .sqr()?
        .sum(2)?
        .sum(0)?
        .to_vec1()?;
    Ok(err
        .iter()
        .zip(&var)
        .map(|(e, v)| *e as f64 / (*v as f64).max(1e-30))
        .collect())
}
