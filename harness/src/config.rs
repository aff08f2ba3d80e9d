//! The `[log]` section every training command shares: how often to log, the progress bar,
//! Weights & Biases.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `[log]`: how often to log, the progress bar, Weights & Biases.
///
/// ```toml
/// [log]
/// every = 1                  # log every N steps (metrics averaged over the N steps)
/// progress = true            # progress bar with tokens/s and ETA (plain lines when not a terminal)
/// progress_every_s = 30      # interval of those plain lines (SLURM, nohup, `| tee`)
/// wandb = false              # stream to Weights & Biases through tools/wandb_bridge.py
/// wandb_project = "sparsetrain"
/// wandb_mode = "offline"     # "online" | "offline" | "disabled"; unset: the WANDB_MODE environment
/// wandb_tags = ["ablation"]  # extra tags; the selector kind is always a tag
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// Log every N steps; each record averages the metrics of its N steps.
    pub every: u64,
    /// A progress bar with tokens/s and ETA (plain lines when stderr is not a terminal).
    pub progress: bool,
    /// Seconds between the plain progress lines printed when stderr is not a terminal (SLURM,
    /// nohup, `| tee`).
    pub progress_every_s: f64,
    /// Stream the metrics to Weights & Biases through tools/wandb_bridge.py.
    pub wandb: bool,
    /// The W&B project.
    pub wandb_project: String,
    /// The W&B entity (team or user); unset: the account's default.
    pub wandb_entity: Option<String>,
    /// `online`, `offline` or `disabled`; unset: the `WANDB_MODE` environment variable.
    pub wandb_mode: Option<String>,
    /// Extra W&B tags; the selector kind is always a tag.
    pub wandb_tags: Vec<String>,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            every: 1,
            progress: true,
            progress_every_s: 30.0,
            wandb: false,
            wandb_project: "sparsetrain".into(),
            wandb_entity: None,
            wandb_mode: None,
            wandb_tags: Vec::new(),
        }
    }
}

impl LogConfig {
    /// Checks values serde cannot; the error names the key (`log.every`...).
    pub fn validate(&self) -> Result<(), String> {
        if self.every == 0 {
            return Err("log.every must be at least 1".into());
        }
        if !(self.progress_every_s >= 0.0 && self.progress_every_s.is_finite()) {
            return Err(format!(
                "log.progress_every_s = {} must be finite and ≥ 0",
                self.progress_every_s
            ));
        }
        if let Some(mode) = &self.wandb_mode {
            if !["online", "offline", "disabled"].contains(&mode.as_str()) {
                return Err(format!(
                    "log.wandb_mode = {mode:?}: expected \"online\", \"offline\" or \"disabled\""
                ));
            }
        }
        if self.wandb && self.wandb_project.trim().is_empty() {
            return Err("log.wandb_project must not be empty when log.wandb = true".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_validation() {
        let cfg = LogConfig::default();
        assert!(cfg.validate().is_ok());
        let bad = LogConfig {
            wandb_mode: Some("offlin".into()),
            ..LogConfig::default()
        };
        assert!(bad.validate().unwrap_err().contains("log.wandb_mode"));
        let zero = LogConfig {
            every: 0,
            ..LogConfig::default()
        };
        assert!(zero.validate().unwrap_err().contains("log.every"));
    }
}
