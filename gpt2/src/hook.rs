//! Named points of the residual stream where activations are read or patched.
use crate::error::{Error, Result};
use std::fmt;
use std::str::FromStr;

/// A point in the residual stream. `ResidPost(l)` and `ResidPre(l + 1)` hold the same values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HookPoint {
    /// Input of block `l` (embeddings for `l = 0`).
    ResidPre(usize),
    /// Output of block `l`.
    ResidPost(usize),
    /// Output of block `l`'s attention, as it is added to the residual stream (after Gemma 2's
    /// post-attention norm).
    AttnOut(usize),
    /// Output of block `l`'s MLP, as it is added to the residual stream.
    MlpOut(usize),
    /// Input of block `l`'s MLP: the normalized residual stream, the norm's weight applied.
    MlpIn(usize),
    /// Output of the final layer norm.
    LnFinal,
}

impl HookPoint {
    /// How many blocks must run before this point is available.
    pub fn blocks_needed(&self, n_layer: usize) -> usize {
        match *self {
            HookPoint::ResidPre(l) => l,
            HookPoint::ResidPost(l)
            | HookPoint::AttnOut(l)
            | HookPoint::MlpOut(l)
            | HookPoint::MlpIn(l) => l + 1,
            HookPoint::LnFinal => n_layer,
        }
    }

    /// The block the point belongs to; None for `ln_final`.
    pub fn layer(&self) -> Option<usize> {
        match *self {
            HookPoint::ResidPre(l)
            | HookPoint::ResidPost(l)
            | HookPoint::AttnOut(l)
            | HookPoint::MlpOut(l)
            | HookPoint::MlpIn(l) => Some(l),
            HookPoint::LnFinal => None,
        }
    }

    /// Whether the point is on the residual stream itself (resid_pre, resid_post, ln_final) rather
    /// than inside a block.
    pub fn is_residual(&self) -> bool {
        matches!(
            self,
            HookPoint::ResidPre(_) | HookPoint::ResidPost(_) | HookPoint::LnFinal
        )
    }

    /// An error naming the point if the model has no layer `l` for it.
    pub fn validate(&self, n_layer: usize) -> Result<()> {
        match self.layer() {
            Some(l) if l >= n_layer => Err(Error::HookLayer {
                point: self.to_string(),
                n_layer,
            }),
            _ => Ok(()),
        }
    }
}

impl fmt::Display for HookPoint {
    /// TransformerLens / SAELens naming.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HookPoint::ResidPre(l) => write!(f, "blocks.{l}.hook_resid_pre"),
            HookPoint::ResidPost(l) => write!(f, "blocks.{l}.hook_resid_post"),
            HookPoint::AttnOut(l) => write!(f, "blocks.{l}.hook_attn_out"),
            HookPoint::MlpOut(l) => write!(f, "blocks.{l}.hook_mlp_out"),
            HookPoint::MlpIn(l) => write!(f, "blocks.{l}.ln2.hook_normalized"),
            HookPoint::LnFinal => write!(f, "ln_final.hook_normalized"),
        }
    }
}

impl FromStr for HookPoint {
    type Err = Error;

    /// Accepts `blocks.L.hook_resid_pre|post`, `blocks.L.hook_attn_out`, `blocks.L.hook_mlp_out`,
    /// `blocks.L.ln2.hook_normalized` (or `blocks.L.hook_mlp_in`), `resid_pre.L`, `resid_post.L`,
    /// `attn_out.L`, `mlp_out.L`, `mlp_in.L`, `ln_final`, `ln_final.hook_normalized`, `ln_f`.
    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::HookPoint(s.to_string());
        let t = s.trim();
        if matches!(t, "ln_final" | "ln_final.hook_normalized" | "ln_f") {
            return Ok(HookPoint::LnFinal);
        }
        let parts: Vec<&str> = t.split('.').collect();
        let (kind, layer): (fn(usize) -> HookPoint, &str) = match parts.as_slice() {
            ["blocks", l, "hook_resid_pre"] | ["resid_pre", l] => (HookPoint::ResidPre, *l),
            ["blocks", l, "hook_resid_post"] | ["resid_post", l] => (HookPoint::ResidPost, *l),
            ["blocks", l, "hook_attn_out"] | ["attn_out", l] => (HookPoint::AttnOut, *l),
            ["blocks", l, "hook_mlp_out"] | ["mlp_out", l] => (HookPoint::MlpOut, *l),
            ["blocks", l, "ln2", "hook_normalized"]
            | ["blocks", l, "hook_mlp_in"]
            | ["mlp_in", l] => (HookPoint::MlpIn, *l),
            _ => return Err(bad()),
        };
        let layer: usize = layer.parse().map_err(|_| bad())?;
        Ok(kind(layer))
    }
}

impl serde::Serialize for HookPoint {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for HookPoint {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_namings_and_round_trips() {
        for (s, h) in [
            ("blocks.12.hook_resid_post", HookPoint::ResidPost(12)),
            ("resid_post.12", HookPoint::ResidPost(12)),
            ("blocks.0.hook_resid_pre", HookPoint::ResidPre(0)),
            ("resid_pre.3", HookPoint::ResidPre(3)),
            ("ln_final", HookPoint::LnFinal),
            ("blocks.2.hook_attn_out", HookPoint::AttnOut(2)),
            ("blocks.2.hook_mlp_out", HookPoint::MlpOut(2)),
            ("blocks.2.ln2.hook_normalized", HookPoint::MlpIn(2)),
            ("mlp_in.1", HookPoint::MlpIn(1)),
        ] {
            let parsed: HookPoint = s.parse().unwrap();
            assert_eq!(parsed, h);
            assert_eq!(parsed.to_string().parse::<HookPoint>().unwrap(), h);
        }
        for bad in ["blocks.x.hook_resid_post", "resid_mid.2", "", "blocks.1"] {
            assert!(bad.parse::<HookPoint>().is_err(), "{bad}");
        }
        assert!(HookPoint::ResidPost(4).validate(4).is_err());
        assert_eq!(HookPoint::ResidPost(1).blocks_needed(4), 2);
        assert_eq!(HookPoint::MlpIn(1).blocks_needed(4), 2);
        assert!(HookPoint::AttnOut(4).validate(4).is_err());
    }
}
