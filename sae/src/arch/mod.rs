//! The architectures, one file each; they share the encoder and the selection of [`crate::model`].
pub mod batchtopk;
pub mod crosscoder;
pub mod matryoshka;

use crate::config::Arch;
use crate::distributed::BatchShare;
use crate::model::{Forward, Sae};
use crate::Result;
use candle_core::Tensor;

/// The training forward pass of `sae`'s architecture on inputs [B, d_in].
pub fn forward(sae: &Sae, x: &Tensor, selector: profk::Selector, seed: u64) -> Result<Forward> {
    forward_in(sae, x, selector, seed, None)
}

/// [`forward`] on this rank's rows of a global batch (the selection as `share` says; the loss is
/// still this rank's own mean).
pub fn forward_in(
    sae: &Sae,
    x: &Tensor,
    selector: profk::Selector,
    seed: u64,
    share: Option<&BatchShare>,
) -> Result<Forward> {
    let enc = sae.encode_in(x, selector, seed, share)?;
    match sae.shape.arch {
        // On the stacked layers the crosscoder's loss is BatchTopK's.
        Arch::Batchtopk | Arch::Crosscoder => batchtopk::forward(sae, x, enc),
        Arch::Matryoshka => matryoshka::forward(sae, x, enc),
    }
}
