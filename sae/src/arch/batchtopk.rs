//! BatchTopK SAE (Bussmann, Leask & Nanda 2024): `pre = ReLU((x − b_dec)·W_enc + b_enc)`, keep the B·k largest
//! entries of `pre` over the whole batch, `recon = acts·W_dec + b_dec`, loss = mean over tokens of ‖x − recon‖².
//! At inference a single threshold (EMA of the smallest kept activation, see `trainer`) replaces the batch
//! selection, which makes the exported SAE a JumpReLU SAE.
use crate::model::{l2_loss, Encoded, Forward, Sae};
use crate::Result;
use candle_core::Tensor;

/// The loss and reconstruction of the encoded batch `enc` of `x`.
pub fn forward(sae: &Sae, x: &Tensor, enc: Encoded) -> Result<Forward> {
    let recon = sae
        .decode_latents(&enc)?
        .broadcast_add(sae.b_dec.as_tensor())?;
    let loss = l2_loss(x, &recon)?;
    Ok(Forward { loss, recon, enc })
}
