//! The architectures, one file each; they share the encoder and the selection of [`crate::model`].
pub mod batchtopk;
pub mod crosscoder;
pub mod matryoshka;

use crate::config::Arch;
use crate::model::{Forward, Sae};
use crate::Result;
use candle_core::Tensor;

/// The training forward pass of `sae`'s architecture on inputs [B, d_in].
pub fn forward(sae: &Sae, x: &Tensor, selector: profk::Selector, seed: u64) -> Result<Forward> {
    match sae.shape.arch {
        // On the stacked layers the crosscoder's loss is BatchTopK's.
        Arch::Batchtopk | Arch::Crosscoder => batchtopk::forward(sae, x, selector, seed),
        Arch::Matryoshka => matryoshka::forward(sae, x, selector, seed),
    }
}
