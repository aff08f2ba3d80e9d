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
    /// Output of the final layer norm.
    LnFinal,
}

impl HookPoint {
    /// How many blocks must run before this point is available.
    pub fn blocks_needed(&self, n_layer: usize) -> usize {
        match *self {
            HookPoint::ResidPre(l) => l,
            HookPoint::ResidPost(l) => l + 1,
            HookPoint::LnFinal => n_layer,
        }
    }

    /// An error naming the point if the model has no layer `l` for it.
    pub fn validate(&self, n_layer: usize) -> Result<()> {
        match *self {
            HookPoint::ResidPre(l) | HookPoint::ResidPost(l) if l >= n_layer => {
                Err(Error::HookLayer {
                    point: self.to_string(),
                    n_layer,
                })
            }
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
            HookPoint::LnFinal => write!(f, "ln_final.hook_normalized"),
        }
    }
}

impl FromStr for HookPoint {
    type Err = Error;

    /// Accepts `blocks.L.hook_resid_pre|post`, `resid_pre.L`, `resid_post.L`, `ln_final`,
    /// `ln_final.hook_normalized`, `ln_f`.
    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::HookPoint(s.to_string());
        let t = s.trim();
        if matches!(t, "ln_final" | "ln_final.hook_normalized" | "ln_f") {
            return Ok(HookPoint::LnFinal);
        }
        let parts: Vec<&str> = t.split('.').collect();
        let (kind, layer) = match parts.as_slice() {
            ["blocks", l, "hook_resid_pre"] => ("pre", *l),
            ["blocks", l, "hook_resid_post"] => ("post", *l),
            ["resid_pre", l] => ("pre", *l),
            ["resid_post", l] => ("post", *l),
            _ => return Err(bad()),
        };
        let layer: usize = layer.parse().map_err(|_| bad())?;
        Ok(if kind == "pre" {
            HookPoint::ResidPre(layer)
        } else {
            HookPoint::ResidPost(layer)
        })
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
    }
}
