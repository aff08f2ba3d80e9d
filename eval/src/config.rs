//! The `[log]` config section, shared by every training config.

use serde::{Deserialize, Serialize};

/// `[log]`: how often to log, the progress bar, Weights & Biases.
///
/// ```toml
/// [log]
/// every = 1                  # log every N steps (metrics averaged over the N steps)
/// progress = true            # progress bar with tokens/s and ETA
/// wandb = false              # stream to Weights & Biases through tools/wandb_bridge.py
/// wandb_project = "sparsetrain"
/// wandb_mode = "offline"     # "online" | "offline" | "disabled"; unset: the WANDB_MODE environment
/// wandb_tags = ["ablation"]  # extra tags; the selector kind is always a tag
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    pub every: u64,
    pub progress: bool,
    pub wandb: bool,
    pub wandb_project: String,
    pub wandb_entity: Option<String>,
    pub wandb_mode: Option<String>,
    pub wandb_tags: Vec<String>,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            every: 1,
            progress: true,
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
