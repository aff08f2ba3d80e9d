//! BatchTopK SAE (Bussmann, Leask & Nanda 2024): `pre = ReLU((x − b_dec)·W_enc + b_enc)`, keep the B·k largest
//! entries of `pre` over the whole batch, `recon = acts·W_dec + b_dec`, loss = mean over tokens of ‖x − recon‖².
//! At inference a single threshold (EMA of the smallest kept activation, see `trainer`) replaces the batch
//! selection, which makes the exported SAE a JumpReLU SAE.
//!
//! The recipe: encode and select ([`Sae::encode_in`]), decode the kept pairs, the L2 loss ([`forward`]).
use crate::distributed::BatchShare;
use crate::model::{l2_loss, Forward, Sae};
use crate::Result;
use candle_core::Tensor;

/// The training forward pass on inputs `x` [B, d_in] (this rank's rows of a global batch with
/// `share`): the batch-global selection, the reconstruction and its loss.
pub fn forward(
    sae: &Sae,
    x: &Tensor,
    selector: profk::Selector,
    seed: u64,
    share: Option<&BatchShare>,
) -> Result<Forward> {
    let enc = sae.encode_in(x, selector, seed, share)?;
    let recon = sae
        .decode_latents(&enc)?
        .broadcast_add(sae.b_dec.as_tensor())?;
    let loss = l2_loss(x, &recon)?;
    Ok(Forward { loss, recon, enc })
}
