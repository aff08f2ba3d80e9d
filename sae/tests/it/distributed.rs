//! Data-parallel training on the thread double: W ranks, each on its rows of the same global
//! batches, select exactly what one process selects on the whole batch and end with its weights.
use candle_core::{Device, Tensor};
use collective::{Collective, DistributedConfig, SelectScope, ThreadCollective};
use sae::distributed::Ranks;
use sae::Trainer;
use std::sync::Arc;

const STEPS: usize = 50;
const BATCH: usize = 64;

fn config(dead_tokens: usize) -> sae::Config {
    let text = format!(
        r#"
name = "dist"
seed = 11
[data]
source = "synthetic"
d_model = 16
features = 48
active_per_token = 3
[sae]
arch = "batchtopk"
latents = 64
k = 4
[sae.aux]
dead_tokens = {dead_tokens}
[train]
batch_size = {BATCH}
steps = {STEPS}
lr = 3e-3
warmup_steps = 2
"#
    );
    sae::Config::from_toml(&text).unwrap()
}

/// The global batches of every step, [BATCH, 1, 16].
fn batches() -> Vec<Tensor> {
    use activations::ActivationSource;
    let mut src = sae::data::Synthetic::new(16, 1, 48, 3, 5, 6, &Device::Cpu);
    (0..=STEPS)
        .map(|_| src.next_batch(BATCH).unwrap().unwrap())
        .collect()
}

fn rows_of(batch: &Tensor, rank: usize, world: usize) -> Tensor {
    let per = batch.dim(0).unwrap() / world;
    batch.narrow(0, rank * per, per).unwrap()
}

/// The selection of `trainer`'s model on `local` (this rank's rows), as global flat indices of
/// the global batch, gathered from every rank (one process: its own).
fn selection(trainer: &Trainer, local: &Tensor) -> Vec<i64> {
    let x = trainer.prepare(local).unwrap();
    let n = trainer.sae.shape.n as i64;
    let sel = trainer.cfg.selector.kind;
    match &trainer.ranks {
        None => {
            let enc = trainer.sae.encode(&x, sel, 0).unwrap();
            enc.idx.to_vec1().unwrap()
        }
        Some(r) => {
            let share = r.share(x.dim(0).unwrap()).unwrap();
            let enc = trainer.sae.encode_in(&x, sel, 0, Some(&share)).unwrap();
            let mine: Vec<i64> = enc.idx.to_vec1().unwrap();
            let global: Vec<i64> = mine.iter().map(|i| i + share.offset as i64 * n).collect();
            collective::all_gather(r.comm(), &global).unwrap().concat()
        }
    }
}

fn weights(t: &Trainer) -> Vec<Vec<f32>> {
    t.sae
        .vars()
        .iter()
        .map(|v| v.as_tensor().flatten_all().unwrap().to_vec1().unwrap())
        .collect()
}

struct Run {
    selections: Vec<Vec<i64>>,
    weights: Vec<Vec<f32>>,
    losses: Vec<f64>,
    wire: Vec<Option<sae::trainer::StepWire>>,
}

fn one_process(cfg: &sae::Config, data: &[Tensor]) -> Run {
    let mut t = Trainer::new(cfg.clone(), &data[0], &Device::Cpu).unwrap();
    let mut run = Run {
        selections: vec![],
        weights: vec![],
        losses: vec![],
        wire: vec![],
    };
    for batch in &data[1..] {
        run.selections.push(selection(&t, batch));
        let stats = t.train_step(batch, true).unwrap();
        run.losses.push(stats.loss);
    }
    run.weights = weights(&t);
    run
}

fn ranks_run(cfg: &sae::Config, data: &[Tensor], world: usize, scope: SelectScope) -> Vec<Run> {
    let dist = DistributedConfig {
        select: scope,
        ..Default::default()
    };
    ThreadCollective::run(world, |c| {
        let rank = c.rank();
        let ranks = Arc::new(Ranks::new(Arc::new(c), &dist));
        let first = rows_of(&data[0], rank, world);
        let mut t = Trainer::new_in(cfg.clone(), &first, &Device::Cpu, ranks).unwrap();
        let mut run = Run {
            selections: vec![],
            weights: vec![],
            losses: vec![],
            wire: vec![],
        };
        for batch in &data[1..] {
            let local = rows_of(batch, rank, world);
            run.selections.push(selection(&t, &local));
            let stats = t.train_step(&local, true).unwrap();
            run.losses.push(stats.loss);
            run.wire.push(stats.wire);
        }
        assert_eq!(t.tokens, ((data.len() - 1) * BATCH) as u64);
        run.weights = weights(&t);
        run
    })
}

fn assert_close(a: &[Vec<f32>], b: &[Vec<f32>], tol: f32, what: &str) {
    for (p, (x, y)) in a.iter().zip(b).enumerate() {
        let worst = x
            .iter()
            .zip(y)
            .map(|(u, v)| (u - v).abs())
            .fold(0f32, f32::max);
        assert!(worst <= tol, "{what}: parameter {p} differs by {worst}");
    }
}

#[test]
fn global_selection_and_weights_match_one_process_on_1_2_and_4_ranks() {
    // Latents unused for 256 tokens count as dead, so the aux-k loss (and its global spread) runs.
    let cfg = config(256);
    let data = batches();
    let reference = one_process(&cfg, &data);
    for world in [1, 2, 4] {
        let runs = ranks_run(&cfg, &data, world, SelectScope::Global);
        for (rank, run) in runs.iter().enumerate() {
            for (step, (got, want)) in run.selections.iter().zip(&reference.selections).enumerate()
            {
                assert_eq!(
                    got, want,
                    "{world} ranks, rank {rank}: step {step} selects differently"
                );
            }
            // Every rank steps with the same summed gradients: the ranks agree exactly.
            assert_eq!(
                run.weights, runs[0].weights,
                "{world} ranks: rank {rank} drifted"
            );
            assert_close(
                &run.weights,
                &reference.weights,
                1e-4,
                &format!("{world} ranks"),
            );
            for (step, (a, b)) in run.losses.iter().zip(&reference.losses).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-4 * b.abs().max(1.0),
                    "step {step}: loss {a} vs {b}"
                );
            }
            for w in &run.wire {
                let w = w.as_ref().expect("a step in a group logs its wire");
                assert!(w.select_wire_bytes <= w.wire_bytes);
                if world > 1 {
                    assert!(w.select_wire_bytes > 0 && w.collective_ms >= w.select_collective_ms);
                }
            }
        }
    }
}

#[test]
fn local_selection_is_each_ranks_own_top_k() {
    let cfg = config(1 << 20);
    let data = batches();
    let runs = ranks_run(&cfg, &data[..3], 2, SelectScope::Local);
    // Step 0 runs on the initial model, the one process's: each rank keeps its rows' top B_r·k.
    let t = Trainer::new(cfg.clone(), &data[0], &Device::Cpu).unwrap();
    let n = cfg.sae.latents as i64;
    let mut want = Vec::new();
    for rank in 0..2 {
        let local = rows_of(&data[1], rank, 2);
        let offset = (rank * BATCH / 2) as i64 * n;
        want.extend(selection(&t, &local).into_iter().map(|i| i + offset));
    }
    for run in &runs {
        assert_eq!(run.selections[0], want);
        assert_eq!(run.selections[0].len(), BATCH * cfg.sae.k);
    }
}
