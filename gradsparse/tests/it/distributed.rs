//! Data-parallel fine-tuning on the thread double: `dense` is single-process training on the
//! global batch; `sparse` and `global` keep the ranks' weights identical (hashed every step); one
//! rank is the single-process run exactly; per-rank checkpoints resume to the same state.
use candle_core::{DType, Tensor};
use collective::ThreadCollective;
use gpt2::Gpt2;
use gradsparse::data::Batches;
use gradsparse::distributed::Group;
use gradsparse::trainer::{build_model, device_of};
use gradsparse::{checkpoint, FinetuneConfig, StepReport, Trainer};
use std::sync::Arc;

/// Per-rank micro-batch of 2 contexts of 16 tokens, random data.
const TINY: &str = r#"
name = "dp"
seed = 5
[model]
name = "tiny"
[data]
synthetic = true
context = 16
[train]
batch_size = 2
steps = 10
lr = 3e-3
[sparsify]
density = 0.01
[distributed]
mode = "data"
hash_every = 1
[log]
progress = false
"#;

fn config(toml: &str, exchange: &str, batch: usize) -> FinetuneConfig {
    let text = toml
        .replace("batch_size = 2", &format!("batch_size = {batch}"))
        .replace(
            "hash_every = 1",
            &format!("hash_every = 1\nexchange = \"{exchange}\""),
        );
    FinetuneConfig::from_toml(&text).unwrap()
}

fn model(cfg: &FinetuneConfig) -> Gpt2 {
    build_model(cfg, &device_of(cfg.device).unwrap()).unwrap()
}

fn trainer(cfg: &FinetuneConfig, model: &Gpt2, group: Option<Group>) -> Trainer {
    let (batches, _) = Batches::from_config(cfg, model.config().vocab_size).unwrap();
    Trainer::with_group(cfg.clone(), model, batches, group).unwrap()
}

fn weights(t: &Trainer) -> Vec<f32> {
    t.vars()
        .iter()
        .flat_map(|v| {
            v.as_tensor()
                .flatten_all()
                .unwrap()
                .to_dtype(DType::F32)
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
        })
        .collect()
}

fn flat(t: &Tensor) -> Vec<f32> {
    t.to_vec1::<f32>().unwrap()
}

/// `steps` steps on each of `world` ranks; every rank's reports and final weights.
fn run_ranks(
    cfg: &FinetuneConfig,
    model: &Gpt2,
    world: usize,
    steps: usize,
) -> Vec<(Vec<StepReport>, Vec<f32>)> {
    ThreadCollective::run(world, |c| {
        let group = Group::new(Arc::new(c), cfg.distributed.exchange);
        let mut t = trainer(cfg, model, Some(group));
        let reports = (0..steps)
            .map(|_| t.train_step_with_stats().unwrap())
            .collect();
        (reports, weights(&t))
    })
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn dense_exchange_is_single_process_training_on_the_global_batch() {
    for (sparsify, worlds) in [("dense", &[1, 2, 4][..]), ("topk", &[2][..])] {
        for &world in worlds {
            let toml = TINY.replace(
                "density = 0.01",
                &format!("mode = \"{sparsify}\"\ndensity = 0.01"),
            );
            let cfg = config(&toml, "dense", 2);
            let base = model(&cfg);
            let mut one = config(&toml, "dense", 2 * world);
            one.distributed.mode = collective::DistributedMode::Off;
            let mut single = trainer(&one, &base, None);
            let single_losses: Vec<f32> =
                (0..2).map(|_| single.train_step().unwrap().loss).collect();
            let ranks = run_ranks(&cfg, &base, world, 2);
            for (step, single_loss) in single_losses.iter().enumerate() {
                let mean: f32 = ranks.iter().map(|r| r.0[step].loss).sum::<f32>() / world as f32;
                assert!(
                    (mean - single_loss).abs() < 1e-4,
                    "{sparsify}, world {world}, step {step}: {mean} vs {single_loss}"
                );
            }
            let want = weights(&single);
            for (rank, (reports, w)) in ranks.iter().enumerate() {
                // AdamW divides by √v: where a gradient is near zero, rounding in the sum can move
                // a coordinate by a fraction of lr; a top-k selection may also swap near-ties at
                // its edge (a step of about lr). Few coordinates, and the mean stays tiny.
                let diffs: Vec<f32> = w.iter().zip(&want).map(|(x, y)| (x - y).abs()).collect();
                let mean = diffs.iter().map(|&d| d as f64).sum::<f64>() / diffs.len() as f64;
                let far = diffs.iter().filter(|&&d| d > 1e-5).count();
                let max = max_diff(w, &want);
                assert!(
                    mean < 1e-7,
                    "{sparsify}, world {world}, rank {rank}: mean {mean}"
                );
                assert!(
                    far * 10_000 <= diffs.len(),
                    "{sparsify}, world {world}, rank {rank}: {far} far"
                );
                if sparsify == "dense" {
                    assert!(max < 0.05 * 3e-3, "world {world}, rank {rank}: max {max}");
                }
                let wire = reports[0].wire.unwrap();
                assert_eq!(wire.sent, wire.dense);
                assert_eq!(wire.dense, 4 * want.len() as u64);
            }
        }
    }
}

#[test]
fn sparse_and_global_keep_the_ranks_identical() {
    for exchange in ["sparse", "global"] {
        for world in [2, 4] {
            let cfg = config(TINY, exchange, 2);
            let base = model(&cfg);
            // hash_every = 1: a rank that drifted would fail its step.
            let ranks = run_ranks(&cfg, &base, world, 3);
            let k = ranks[0].0[0].k;
            for (reports, w) in &ranks {
                assert_eq!(w, &ranks[0].1);
                for r in reports {
                    assert!(r.weights_hash.is_some());
                    let wire = r.wire.unwrap();
                    assert!(wire.sent > 0 && wire.sent < wire.dense / 10, "{wire:?}");
                    if exchange == "global" {
                        assert_eq!(r.k, k, "global keeps exactly k whatever the world");
                    }
                }
            }
            if exchange == "sparse" {
                // The union of the ranks' selections: more than one rank's k.
                let own = gradsparse::select::k_for(0.01, ranks[0].1.len());
                assert!(ranks[0].0[0].k > own, "{} vs {own}", ranks[0].0[0].k);
            }
        }
    }
}

/// One rank through the group: the same weights, bit for bit, as the plain single-process trainer.
#[test]
fn one_rank_is_the_single_process_run() {
    for exchange in ["dense", "sparse", "global"] {
        let cfg = config(TINY, exchange, 2);
        let base = model(&cfg);
        let mut plain = trainer(&cfg, &base, None);
        for _ in 0..3 {
            plain.train_step().unwrap();
        }
        let ranks = run_ranks(&cfg, &base, 1, 3);
        assert_eq!(ranks[0].1, weights(&plain), "{exchange}");
    }
}

/// Two ranks save per-rank checkpoints after 2 steps; two fresh ranks load them and train 2 more:
/// the weights and each rank's residual equal those of 4 uninterrupted steps.
#[test]
fn per_rank_checkpoints_resume_each_ranks_residual() {
    let cfg = config(TINY, "global", 2);
    let base = model(&cfg);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ckpt");
    let straight = ThreadCollective::run(2, |c| {
        let mut t = trainer(
            &cfg,
            &base,
            Some(Group::new(Arc::new(c), cfg.distributed.exchange)),
        );
        for _ in 0..2 {
            t.train_step().unwrap();
        }
        checkpoint::save(&t, &path).unwrap();
        for _ in 0..2 {
            t.train_step().unwrap();
        }
        (weights(&t), flat(t.feedback().residual()))
    });
    assert_ne!(straight[0].1, straight[1].1, "the ranks' residuals differ");
    assert!(path.join(checkpoint::optimizer_file(1, 2)).exists());
    let resumed = ThreadCollective::run(2, |c| {
        let mut t = trainer(
            &cfg,
            &base,
            Some(Group::new(Arc::new(c), cfg.distributed.exchange)),
        );
        checkpoint::load(&mut t, &path).unwrap();
        for _ in 0..2 {
            t.train_step().unwrap();
        }
        (weights(&t), flat(t.feedback().residual()))
    });
    assert_eq!(resumed, straight);
    // A checkpoint of 2 ranks is refused by one.
    let mut alone = trainer(&cfg, &base, None);
    let err = checkpoint::load(&mut alone, &path).unwrap_err().to_string();
    assert!(err.contains("2 rank(s)"), "{err}");
}

#[test]
fn distributed_runs_are_refused_on_the_cpu() {
    let cfg = config(TINY, "sparse", 2);
    let err = gradsparse::distributed::join(&cfg.distributed, &candle_core::Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("needs CUDA devices"), "{err}");
    let latents = FinetuneConfig::from_toml(&TINY.replace("mode = \"data\"", "mode = \"latents\""))
        .unwrap_err()
        .to_string();
    assert!(latents.contains("distributed.mode"), "{latents}");
}
