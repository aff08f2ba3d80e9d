//! Where a run's feature dashboards come from, settled before training: what can be checked then is
//! (held-out contexts exist, held-out shards store what the training shards store), so that building
//! them after training fails only on a real error, and a run that can have none says so up front.
use super::{build_through_model, contexts_wanted, shards, FeatureOptions, InferenceSae};
use crate::{Error, Result};
use activations::{corpus::Contexts, shards::Manifest};
use candle_core::Device;
use eval::report::features::FeatureDashboards;
use gpt2::HookPoint;
use models::Model;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub enum DashboardPlan {
    /// Contexts of the corpus, through the run's model at its hook points.
    Model {
        model: Arc<Model>,
        hooks: Vec<HookPoint>,
        contexts: Contexts,
        /// The contexts are the held-out split's (else the training split's: the held-out one is empty).
        held_out: bool,
    },
    /// The rows stored in activation shards: the run's held-out shards, else its training shards.
    Shards { dir: PathBuf, held_out: bool },
    /// None can be built; why.
    Unavailable(String),
}

impl DashboardPlan {
    /// From the contexts of a model-backed run: the held-out split's, else (a corpus of one document
    /// has none) the training split's; at least the first contexts a build reads of each.
    pub fn model(
        model: Arc<Model>,
        hooks: Vec<HookPoint>,
        (held_out, train): (&Contexts, &Contexts),
        corpus: &str,
        opts: &FeatureOptions,
    ) -> Self {
        let (from, is_held_out) = if held_out.is_empty() {
            (train, false)
        } else {
            (held_out, true)
        };
        let t = from.context_len;
        if from.is_empty() {
            return Self::Unavailable(format!(
                "`{corpus}` gives no complete context of {t} tokens"
            ));
        }
        let n = contexts_wanted(opts, t).min(from.len());
        let contexts = Contexts {
            tokens: from.tokens[..n * t].to_vec(),
            context_len: t,
        };
        Self::Model {
            model,
            hooks,
            contexts,
            held_out: is_held_out,
        }
    }

    /// From the shards of a shards-backed run: `held_out_dir` when set (named by `key` in errors), else
    /// the training shards in `dir`.
    pub fn shards(dir: &Path, held_out_dir: Option<&Path>, key: &str) -> Result<Self> {
        let training = Manifest::read(dir)?;
        let (from, m) = match held_out_dir {
            Some(h) => (h, Manifest::read(h)?),
            None => (dir, training.clone()),
        };
        if (&m.hook_points, m.d_model) != (&training.hook_points, training.d_model) {
            return Err(Error::config(
                key,
                format!(
                    "{} stores {} of {} values; the training shards {} of {}",
                    from.display(),
                    hook_list(&m.hook_points),
                    m.d_model,
                    hook_list(&training.hook_points),
                    training.d_model
                ),
            ));
        }
        if shards::complete_contexts(&m) == 0 {
            return Ok(Self::Unavailable(format!(
                "{} holds {} rows, fewer than one context of {}",
                from.display(),
                m.total_tokens,
                m.context_len
            )));
        }
        Ok(Self::Shards {
            dir: from.to_path_buf(),
            held_out: held_out_dir.is_some(),
        })
    }

    /// Where the dashboards come from, in a line (the run's facts).
    pub fn describe(&self) -> String {
        match self {
            Self::Model { held_out: true, .. } => "the corpus' held-out split".into(),
            Self::Model { .. } => "the corpus' training split (its held-out split is empty)".into(),
            Self::Shards {
                dir,
                held_out: true,
            } => format!("the held-out shards in {}", dir.display()),
            Self::Shards {
                dir,
                held_out: false,
            } => format!(
                "the training shards in {} (no data.held_out_dir)",
                dir.display()
            ),
            Self::Unavailable(why) => format!("none: {why}"),
        }
    }

    /// Why none can be built, when none can.
    pub fn unavailable(&self) -> Option<&str> {
        match self {
            Self::Unavailable(why) => Some(why),
            _ => None,
        }
    }

    /// The dashboards of `sae`; None when the plan has none.
    pub fn build(
        &self,
        sae: &InferenceSae,
        opts: &FeatureOptions,
        device: &Device,
    ) -> Result<Option<FeatureDashboards>> {
        Ok(Some(match self {
            Self::Model {
                model,
                hooks,
                contexts,
                ..
            } => build_through_model(sae, model, hooks, contexts, opts)?,
            Self::Shards { dir, .. } => shards::build_from_shards(sae, dir, opts, device)?,
            Self::Unavailable(_) => return Ok(None),
        }))
    }
}

fn hook_list(hooks: &[HookPoint]) -> String {
    hooks
        .iter()
        .map(|h| h.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
