//! The latents' densities at one evaluation, as a histogram over log10(density), written beside the
//! metrics as `latent_density/step-XXXXXXXX.json`: the W&B bridge logs it as a histogram with the
//! evaluation's record.
//!
//! ```json
//! {"step": 2000, "tokens": 8192, "latents": 4096, "dead": 12,
//!  "log10_edges": [-6.0, -5.75, ..., 0.0], "counts": [0, 3, ...]}
//! ```

use crate::{atomic::write_json_atomic, error::Result, run_dir::RunDir};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The folder of a run that holds one file per evaluation.
pub const LATENT_DENSITY_DIR: &str = "latent_density";
/// The histogram's lowest edge: densities below 10^-6 (and 0) fall in the first bin or `dead`.
const LOG10_LOW: f64 = -6.0;
const BINS_PER_DECADE: usize = 4;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatentDensity {
    /// The optimizer step of the evaluation.
    pub step: u64,
    /// Tokens the densities were measured on.
    pub tokens: u64,
    pub latents: usize,
    /// Latents active on none of the tokens (not in the histogram: log10(0) has no bin).
    pub dead: usize,
    /// Bin edges over log10(density), one more than `counts`.
    pub log10_edges: Vec<f64>,
    pub counts: Vec<u64>,
}

impl LatentDensity {
    /// The histogram of `densities` (each latent's share of `tokens`, in [0, 1]).
    pub fn of(step: u64, tokens: u64, densities: &[f64]) -> LatentDensity {
        let bins = (-LOG10_LOW) as usize * BINS_PER_DECADE;
        let width = 1.0 / BINS_PER_DECADE as f64;
        let log10_edges: Vec<f64> = (0..=bins).map(|i| LOG10_LOW + i as f64 * width).collect();
        let mut counts = vec![0u64; bins];
        let mut dead = 0;
        for &d in densities {
            if d > 0.0 {
                let bin = ((d.log10() - LOG10_LOW) / width).floor();
                counts[(bin.max(0.0) as usize).min(bins - 1)] += 1;
            } else {
                dead += 1;
            }
        }
        LatentDensity {
            step,
            tokens,
            latents: densities.len(),
            dead,
            log10_edges,
            counts,
        }
    }

    /// Where the histogram of the evaluation at `step` goes in `run`.
    pub fn path(run: &RunDir, step: u64) -> PathBuf {
        run.path()
            .join(LATENT_DENSITY_DIR)
            .join(format!("step-{step:08}.json"))
    }

    /// Writes it (atomically) to [`LatentDensity::path`].
    pub fn write(&self, run: &RunDir) -> Result<PathBuf> {
        let path = Self::path(run, self.step);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(crate::Error::io("creating directory", dir))?;
        }
        write_json_atomic(&path, self)?;
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn densities_fall_in_their_decade_bins() {
        let h = LatentDensity::of(7, 1000, &[0.0, 1.0, 0.5, 0.001, 1e-9, 0.0]);
        assert_eq!((h.latents, h.dead), (6, 2));
        assert_eq!(h.counts.iter().sum::<u64>(), 4);
        assert_eq!(h.log10_edges.len(), h.counts.len() + 1);
        assert_eq!(*h.counts.last().unwrap(), 1, "1.0 in the top bin");
        assert_eq!(h.counts[0], 1, "below 1e-6: the first bin");
        let bin = |d: f64| ((d.log10() + 6.0) * 4.0).floor() as usize;
        assert_eq!((bin(0.5), bin(0.001)), (22, 12));
        assert_eq!((h.counts[22], h.counts[12]), (1, 1));
    }
}
