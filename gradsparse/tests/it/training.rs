//! The tiny model trains, checkpoints in Hugging Face layout, and resumes to the same state.
use candle_core::{DType, Device, Tensor};
use gpt2::Gpt2;
use gradsparse::data::Batches;
use gradsparse::run::{finetune, RunOptions};
use gradsparse::trainer::{build_model, device_of};
use gradsparse::{checkpoint, FinetuneConfig, Trainer};
use runtime::test_device;

const SMALL: &str = r#"
name = "test"
seed = 3
[model]
name = "tiny"
[data]
context = 32
[train]
batch_size = 4
steps = 6
lr = 3e-3
weight_decay = 0.01
eval_batches = 4
[sparsify]
density = 0.02
momentum_correction = true
warmup_steps = 2
[selector]
compare = true
[log]
progress = false
"#;

fn trainer(toml: &str) -> Trainer {
    let cfg = FinetuneConfig::from_toml(toml).unwrap();
    let device = device_of(cfg.device).unwrap();
    let model = build_model(&cfg, &device).unwrap();
    let (batches, _) = Batches::from_config(&cfg, model.config().vocab_size).unwrap();
    Trainer::new(cfg, &model, batches).unwrap()
}

fn flat(t: &Tensor) -> Vec<f32> {
    t.flatten_all()
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .to_vec1()
        .unwrap()
}

fn state(t: &Trainer) -> Vec<Vec<f32>> {
    let mut out: Vec<Vec<f32>> = t.vars().iter().map(|v| flat(v.as_tensor())).collect();
    out.push(flat(t.feedback().residual()));
    out.extend(t.feedback().velocity().map(flat));
    let (m, v) = t.optimizer().moments();
    out.push(flat(m));
    out.push(flat(v));
    out
}

#[test]
fn resume_reaches_the_uninterrupted_state() {
    let mut straight = trainer(SMALL);
    for _ in 0..6 {
        straight.train_step().unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let mut first = trainer(SMALL);
    for _ in 0..3 {
        first.train_step().unwrap();
    }
    checkpoint::save(&first, dir.path()).unwrap();
    drop(first);
    let mut resumed = trainer(SMALL);
    checkpoint::load(&mut resumed, dir.path()).unwrap();
    assert_eq!(resumed.step_count(), 3);
    for _ in 0..3 {
        resumed.train_step().unwrap();
    }
    assert!(
        state(&resumed) == state(&straight),
        "resumed state differs from the uninterrupted one"
    );
}

#[test]
fn checkpoint_loads_back_through_the_activations_loader() {
    let mut t = trainer(SMALL);
    t.train_step().unwrap();
    let dir = tempfile::tempdir().unwrap();
    checkpoint::save(&t, dir.path()).unwrap();
    let loaded = Gpt2::load(&dir.path().to_string_lossy(), DType::F32, &Device::Cpu).unwrap();
    let tokens = Tensor::new(&[[50256u32, 464, 3290, 318, 257]], &Device::Cpu).unwrap();
    let a = flat(&t.model().forward_logits(&tokens).unwrap());
    let b = flat(&loaded.forward_logits(&tokens).unwrap());
    let worst = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    assert!(
        a.len() == b.len() && worst < 1e-5,
        "reloaded logits differ by up to {worst}"
    );
    // A checkpoint of another model size is refused with a clear message.
    let mut other = trainer(
        &SMALL
            .replace("density = 0.02", "density = 0.05")
            .replace("name = \"tiny\"", "name = \"tiny\"\ninit = \"random\""),
    );
    std::fs::write(
        dir.path().join(checkpoint::STATE_FILE),
        std::fs::read_to_string(dir.path().join(checkpoint::STATE_FILE))
            .unwrap()
            .replace("wte.weight", "wte.weights"),
    )
    .unwrap();
    let err = checkpoint::load(&mut other, dir.path())
        .unwrap_err()
        .to_string();
    assert!(err.contains("parameters differ"), "{err}");
}

#[test]
fn loss_decreases_on_the_corpus() {
    let toml = SMALL
        .replace("steps = 6", "steps = 25")
        .replace("compare = true", "compare = false");
    let mut t = trainer(&toml);
    let mut losses = Vec::new();
    for _ in 0..25 {
        let r = t.train_step().unwrap();
        assert!(r.k > 0 && r.select.as_nanos() > 0);
        losses.push(r.loss);
    }
    let head: f32 = losses[..5].iter().sum::<f32>() / 5.0;
    let tail: f32 = losses[20..].iter().sum::<f32>() / 5.0;
    assert!(tail < head - 0.5, "loss {head} → {tail}: {losses:?}");
}

#[test]
fn run_resumes_like_an_uninterrupted_run() {
    let root = tempfile::tempdir().unwrap();
    let write = |name: &str, steps: u64| {
        let path = root.path().join(name);
        std::fs::write(
            &path,
            SMALL.replace(
                "steps = 6",
                &format!("steps = {steps}\ncheckpoint_every = 2"),
            ),
        )
        .unwrap();
        path
    };
    let opts = |out: &str, resume: bool| RunOptions {
        out: Some(root.path().join(out)),
        resume,
        ..Default::default()
    };
    let full = finetune(&write("full.toml", 4), &opts("full", false)).unwrap();
    finetune(&write("half.toml", 2), &opts("split", false)).unwrap();
    let resumed = finetune(&write("rest.toml", 4), &opts("split", true)).unwrap();
    assert_eq!(resumed.summary.progress.step, 4);
    let weights = |r: &gradsparse::run::RunResult| {
        let dir = r.summary.last_checkpoint.clone().unwrap();
        std::fs::read(dir.join("model.safetensors")).unwrap()
    };
    assert_eq!(weights(&full), weights(&resumed));
    let records = harness::metrics::read_records(&resumed.run_dir.join("metrics.jsonl")).unwrap();
    let train: Vec<u64> = records
        .iter()
        .filter(|r| r.kind == harness::RecordKind::Train)
        .map(|r| r.step)
        .collect();
    assert_eq!(train, vec![1, 2, 3, 4]);
    assert!(records.iter().any(|r| r.metrics.contains_key("select_ms")));
    // run.json names the starting weights: a random initialization by its size and seed.
    let meta = harness::RunDir::open_existing(&resumed.run_dir)
        .unwrap()
        .read_meta()
        .unwrap();
    let provenance = meta.provenance.expect("run.json records the provenance");
    assert_eq!(provenance.model_sha256.as_deref(), Some("random:tiny:3"));
    // Every logged step measures the error feedback.
    for r in records
        .iter()
        .filter(|r| r.kind == harness::RecordKind::Train)
    {
        let share = r.metrics["ef_kept_share"];
        assert!(share > 0.0 && share <= 1.0, "step {}: {share}", r.step);
        assert!(r.metrics["ef_residual_norm"] > 0.0, "step {}", r.step);
    }
    // A resume with a different sparsification is refused, naming the section.
    let changed = root.path().join("changed.toml");
    std::fs::write(&changed, SMALL.replace("density = 0.02", "density = 0.5")).unwrap();
    let err = finetune(&changed, &opts("split", true))
        .unwrap_err()
        .to_string();
    assert!(err.contains("sparsify"), "{err}");
}

/// Without momentum correction the backward pass adds the linear layers' weight gradients straight
/// into the residual (gradient sinks). After the first step the residual must hold the gradient a
/// plain backward pass gives (bit for bit on the CPU; to float rounding on CUDA, where the products
/// may take other algorithms), except at the applied coordinates, which are zero.
fn sunk_gradients_reach_the_residual(device: &str) {
    let toml = SMALL
        .replace("momentum_correction = true", "momentum_correction = false")
        .replace("warmup_steps = 2", "warmup_steps = 0")
        .replace("seed = 3", &format!("seed = 3\ndevice = \"{device}\""))
        .replace("name = \"tiny\"", "name = \"tiny\"\ntf32 = false");
    let cfg = FinetuneConfig::from_toml(&toml).unwrap();
    let mut t = trainer(&toml);
    let (batches, _) = Batches::from_config(&cfg, t.model().config().vocab_size).unwrap();
    let tokens = batches.train_batch(0, t.device()).unwrap();
    let grads = t.model().forward_loss(&tokens).unwrap().backward().unwrap();
    let want: Vec<f32> = t
        .vars()
        .iter()
        .flat_map(|v| flat(grads.get(v).expect("every weight has a gradient")))
        .collect();
    let report = t.train_step().unwrap();
    let got = flat(t.feedback().residual());
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f32, |m, w| m.max(w.abs()));
    let tolerance = if device == "cpu" { 0.0 } else { 1e-5 * scale };
    let mut applied = 0;
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        if *g == 0.0 && *w != 0.0 {
            applied += 1;
        } else {
            assert!(
                (g - w).abs() <= tolerance,
                "coordinate {i}: residual {g}, gradient {w}"
            );
        }
    }
    assert!(
        applied <= report.k,
        "{applied} coordinates zeroed, {} applied",
        report.k
    );
    assert!(
        applied > report.k / 2,
        "only {applied} of {} applied coordinates seen",
        report.k
    );
}

test_device!(sunk_gradients_reach_the_residual, sunk_gradients_on);
fn sunk_gradients_on(device: &Device) -> anyhow::Result<()> {
    sunk_gradients_reach_the_residual(if device.is_cuda() { "cuda" } else { "cpu" });
    Ok(())
}

#[test]
fn keep_checkpoints_keeps_the_newest_n() {
    let root = tempfile::tempdir().unwrap();
    let path = root.path().join("keep.toml");
    let toml = SMALL.replace(
        "steps = 6",
        "steps = 3\ncheckpoint_every = 1\nkeep_checkpoints = 1",
    );
    std::fs::write(&path, toml).unwrap();
    let opts = RunOptions {
        out: Some(root.path().join("run")),
        ..Default::default()
    };
    finetune(&path, &opts).unwrap();
    let kept: Vec<String> = std::fs::read_dir(root.path().join("run/checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("step-"))
        .collect();
    assert_eq!(kept, ["step-00000003"]);
}
