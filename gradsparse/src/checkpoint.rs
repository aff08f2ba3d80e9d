//! Checkpoints: the model in Hugging Face layout (config.json + model.safetensors, loadable by
//! `gpt2::Gpt2::load`), plus `optimizer.safetensors` (residual, velocity, AdamW moments)
//! and `trainer_state.json` (steps, layout), each written atomically.
//!
//! A data-parallel run's ranks hold identical weights and AdamW moments but each its own residual:
//! rank 0 writes the model and the state, and every rank writes its own
//! `optimizer.rank<R>.safetensors` (residual, velocity, moments); a resume restores each rank's
//! own, and refuses a checkpoint of another world size.
use crate::error::{Error, Result};
use crate::trainer::Trainer;
use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};
use std::{collections::HashMap, path::Path};

pub const OPTIMIZER_FILE: &str = "optimizer.safetensors";
pub const STATE_FILE: &str = "trainer_state.json";

/// The scalar state of a trainer and the parameter layout it was saved with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainerState {
    /// Completed training steps.
    pub step: u64,
    /// AdamW's step count (its bias correction).
    pub optimizer_step: u64,
    /// (name, element count) of every parameter, in layout order.
    pub layout: Vec<(String, usize)>,
    pub momentum_correction: bool,
    /// Ranks of the run that wrote it (1 for a single process).
    #[serde(default = "one")]
    pub world: usize,
}

fn one() -> usize {
    1
}

/// The optimizer file of `rank` in a run of `world` ranks.
pub fn optimizer_file(rank: usize, world: usize) -> String {
    if world == 1 {
        OPTIMIZER_FILE.into()
    } else {
        format!("optimizer.rank{rank}.safetensors")
    }
}

fn rank_world(trainer: &Trainer) -> (usize, usize) {
    trainer.group().map_or((0, 1), |g| (g.rank(), g.world()))
}

/// Writes `trainer`'s full state into `dir` (created if needed).
pub fn save(trainer: &Trainer, dir: &Path) -> Result<()> {
    let fail = |message: String| Error::Checkpoint {
        path: dir.to_path_buf(),
        message,
    };
    let (rank, world) = rank_world(trainer);
    if rank == 0 {
        trainer
            .model()
            .save_hf(dir)
            .map_err(|e| fail(e.to_string()))?;
    } else {
        std::fs::create_dir_all(dir).map_err(|e| fail(e.to_string()))?;
    }
    let (m, v) = trainer.optimizer().moments();
    let mut tensors: HashMap<String, Tensor> = HashMap::from([
        (
            "residual".to_string(),
            trainer.feedback().residual().clone(),
        ),
        ("adam_m".to_string(), m.clone()),
        ("adam_v".to_string(), v.clone()),
    ]);
    if let Some(u) = trainer.feedback().velocity() {
        tensors.insert("velocity".into(), u.clone());
    }
    let path = dir.join(optimizer_file(rank, world));
    runtime::fs::write_atomic_via(&path, |tmp| candle_core::safetensors::save(&tensors, tmp))
        .map_err(|e| fail(e.to_string()))?;
    let state = TrainerState {
        step: trainer.step_count(),
        optimizer_step: trainer.optimizer().step_count(),
        layout: trainer
            .layout()
            .spans()
            .iter()
            .map(|s| (s.name.clone(), s.len))
            .collect(),
        momentum_correction: trainer.feedback().velocity().is_some(),
        world,
    };
    if rank == 0 {
        harness::atomic::write_json_atomic(&dir.join(STATE_FILE), &state)
            .map_err(|e| fail(e.to_string()))?;
    }
    // The checkpoint is whole once every rank has written its part.
    if let Some(group) = trainer.group() {
        group
            .collective()
            .barrier()
            .map_err(|e| fail(format!("waiting for the other ranks: {e}")))?;
    }
    Ok(())
}

/// Restores `trainer` from a checkpoint written by [`save`] for the same model and config.
pub fn load(trainer: &mut Trainer, dir: &Path) -> Result<()> {
    let fail = |message: String| Error::Checkpoint {
        path: dir.to_path_buf(),
        message,
    };
    let state_path = dir.join(STATE_FILE);
    let text =
        std::fs::read_to_string(&state_path).map_err(|e| fail(format!("{STATE_FILE}: {e}")))?;
    let state: TrainerState =
        serde_json::from_str(&text).map_err(|e| fail(format!("{STATE_FILE}: {e}")))?;
    let layout: Vec<(String, usize)> = trainer
        .layout()
        .spans()
        .iter()
        .map(|s| (s.name.clone(), s.len))
        .collect();
    let (rank, world) = rank_world(trainer);
    if state.world != world {
        return Err(fail(format!(
            "written by a run of {} rank(s), this run has {world}: each rank's residual is its own",
            state.world
        )));
    }
    if state.layout != layout {
        return Err(fail(
            "its parameters differ from the configured model's (another model size?)".into(),
        ));
    }
    let device = trainer.device().clone();
    let weights = read_safetensors(&dir.join("model.safetensors"), &device).map_err(fail)?;
    for (span, var) in trainer.layout().spans().iter().zip(trainer.vars()) {
        let t = weights
            .get(&span.name)
            .ok_or_else(|| fail(format!("model.safetensors lacks {}", span.name)))?;
        var.set(&t.to_dtype(var.dtype())?.reshape(span.shape.clone())?)?;
    }
    let optimizer = optimizer_file(rank, world);
    let mut opt = read_safetensors(&dir.join(&optimizer), &device).map_err(fail)?;
    let mut take = |name: &str| {
        opt.remove(name)
            .ok_or_else(|| fail(format!("{optimizer} lacks {name}")))
    };
    let (residual, m, v) = (take("residual")?, take("adam_m")?, take("adam_v")?);
    let velocity = opt.remove("velocity");
    trainer.feedback_mut().restore(residual, velocity)?;
    trainer
        .optimizer_mut()
        .restore(m, v, state.optimizer_step)?;
    trainer.set_step_count(state.step);
    Ok(())
}

fn read_safetensors(
    path: &Path,
    device: &Device,
) -> std::result::Result<HashMap<String, Tensor>, String> {
    candle_core::safetensors::load(path, device)
        .map_err(|e| format!("reading {}: {e}", path.display()))
}
