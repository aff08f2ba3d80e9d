//! `[distributed]`: how a training command spreads over ranks, one process per GPU. One section
//! for every command; each command refuses the values it does not support, naming the key.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How the run spreads over ranks. The ranks come from the launcher's environment (torchrun,
/// SLURM or the commands' own `--nproc`); without one a distributed mode runs as rank 0 of 1.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct DistributedConfig {
    /// `off` (one process), `data` (each rank trains on its own batches; the update is shared)
    /// or `latents` (train-sae only: each rank holds n/W latents of the dictionary and every rank
    /// sees the same batch).
    pub mode: DistributedMode,
    /// train-sae, `data` mode: BatchTopK over the batch of all ranks (`global`, exact, the same
    /// selection as one process on the whole batch) or over each rank's own batch (`local`).
    pub select: SelectScope,
    /// finetune, `data` mode: what crosses the wire each step. `dense`: an all-reduce of the full
    /// gradient; `sparse`: an all-gather of each rank's selected (index, value) pairs, summed into
    /// one update; `global`: the exact global top-k of the summed sparse gradients.
    pub exchange: GradientExchange,
    /// Seconds a rank waits for the others at start-up before the job fails naming the ranks that
    /// did not arrive; in training, a rank that completes no step for this long (a rank died or
    /// hangs) ends itself with an error naming it, so the job ends. Longer than the slowest
    /// checkpoint write or evaluation.
    pub timeout_s: f64,
    /// Every this many steps each rank hashes its weights and the hashes are compared, so ranks
    /// that drift apart stop the run (0 = never).
    pub hash_every: usize,
}

impl Default for DistributedConfig {
    fn default() -> Self {
        Self {
            mode: DistributedMode::Off,
            select: SelectScope::Global,
            exchange: GradientExchange::Sparse,
            timeout_s: 300.0,
            hash_every: 100,
        }
    }
}

impl DistributedConfig {
    /// Whether the run joins a group of ranks.
    pub fn is_distributed(&self) -> bool {
        self.mode != DistributedMode::Off
    }

    /// The timeout as a duration (checked positive and finite by [`DistributedConfig::validate`]).
    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.timeout_s)
    }

    /// Checks the values every command shares; `Err` holds the key and why.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if !(self.timeout_s.is_finite() && self.timeout_s > 0.0) {
            return Err((
                "distributed.timeout_s",
                format!(
                    "must be a positive number of seconds, got {}",
                    self.timeout_s
                ),
            ));
        }
        Ok(())
    }
}

/// See [`DistributedConfig::mode`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DistributedMode {
    Off,
    Data,
    Latents,
}

/// See [`DistributedConfig::select`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SelectScope {
    Global,
    Local,
}

/// See [`DistributedConfig::exchange`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum GradientExchange {
    Dense,
    Sparse,
    Global,
}
