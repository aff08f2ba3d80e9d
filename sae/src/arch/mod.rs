//! The architectures, one file each with its whole recipe: the training forward pass (encode and
//! select, decode, loss), the config keys it owns and its own metrics. They share the encoder and the
//! selection of [`crate::model`]; the trainer adds the aux-k loss, the optimizer step and the
//! bookkeeping every architecture has.
pub mod batchtopk;
pub mod crosscoder;
pub mod matryoshka;

use crate::config::{Arch, SaeConfig};
use crate::distributed::BatchShare;
use crate::model::{Forward, Sae};
use crate::{Error, Result};
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
    match sae.shape.arch {
        Arch::Batchtopk => batchtopk::forward(sae, x, selector, seed, share),
        Arch::Matryoshka => matryoshka::forward(sae, x, selector, seed, share),
        Arch::Crosscoder => crosscoder::forward(sae, x, selector, seed, share),
    }
}

/// The FVU of each layer of the reconstruction `recon` of `x` [B, d_in]: the crosscoder's; empty for
/// the one-layer architectures.
pub fn layer_fvu(sae: &Sae, x: &Tensor, recon: &Tensor) -> Result<Vec<f64>> {
    match sae.shape.arch {
        Arch::Crosscoder => crosscoder::layer_fvu(x, recon, sae.shape.layers),
        Arch::Batchtopk | Arch::Matryoshka => Ok(Vec::new()),
    }
}

/// The `[sae]` keys that belong to one architecture (`group_sizes`) and the data's layer count
/// (`layers`) it takes.
pub fn validate(s: &SaeConfig, layers: usize) -> Result<()> {
    match s.arch {
        Arch::Matryoshka => matryoshka::validate(s)?,
        _ if !s.group_sizes.is_empty() => {
            return Err(Error::config(
                "sae.group_sizes",
                "only the matryoshka architecture has groups",
            ));
        }
        _ => {}
    }
    match s.arch {
        Arch::Crosscoder => crosscoder::validate(layers),
        Arch::Batchtopk | Arch::Matryoshka if layers != 1 => Err(Error::config(
            "data.layers",
            format!("{:?} takes exactly one layer, got {layers}", s.arch),
        )),
        Arch::Batchtopk | Arch::Matryoshka => Ok(()),
    }
}
