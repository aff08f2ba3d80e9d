//! `finetune-bench`: step time of error-feedback sparsified AdamW on GPT-2-shaped random models, per
//! selector, as a markdown table in the columns of bench/peers/torch_ef_step.py.
//!
//!     finetune-bench [--models gpt2-medium,gpt2-xl] [--selectors profk,sort,radix] [--device cuda]
//!                    [--batch 4] [--context 512] [--density 1e-3] [--steps 8] [--warmup 3]
use anyhow::Context;
use clap::Parser;
use gradsparse::data::Batches;
use gradsparse::select::SelectorChoice;
use gradsparse::trainer::{build_model, device_of};
use gradsparse::{FinetuneConfig, StepReport, Trainer};
use profk::Selector;
use std::time::Duration;

#[derive(Parser)]
#[command(about = "Benchmark one error-feedback sparsified fine-tuning step per selector")]
struct Args {
    #[arg(long, default_value = "gpt2-medium,gpt2-xl", value_delimiter = ',')]
    models: Vec<String>,
    #[arg(long, default_value = "profk,radix,sort", value_delimiter = ',')]
    selectors: Vec<String>,
    #[arg(long, default_value = "cuda")]
    device: String,
    #[arg(long, default_value_t = 4)]
    batch: usize,
    #[arg(long, default_value_t = 512)]
    context: usize,
    #[arg(long, default_value_t = 1e-3)]
    density: f64,
    #[arg(long, default_value_t = 8)]
    steps: usize,
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// f32 matmuls on TF32 tensor cores (PyTorch's allow_tf32).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    tf32: bool,
    /// First check the device against the CPU: the tiny model from the same weights, a few steps each.
    #[arg(long)]
    check: bool,
}

/// Trains the tiny model a few steps on the CPU and on `device` from the same weights and prints the
/// losses and the largest parameter difference.
fn check(device_name: &str) -> anyhow::Result<()> {
    let toml = "name = \"check\"\n[data]\nsynthetic = true\nbatch = 2\ncontext = 32\n[sparsify]\ndensity = 0.01\nmomentum_correction = true\n[selector]\ncompare = true";
    let cfg = FinetuneConfig::from_toml(toml)?;
    let base = build_model(&cfg, &candle_core::Device::Cpu)?;
    let device = device_of(device_name)?;
    let mut out = Vec::new();
    for dev in [candle_core::Device::Cpu, device] {
        let model = base.converted(candle_core::DType::F32, &dev)?;
        let (batches, _) = Batches::from_config(&cfg, model.config().vocab_size)?;
        let mut t = Trainer::new(cfg.clone(), &model, batches)?;
        let losses: Vec<f32> = (0..4)
            .map(|_| t.train_step().map(|r| r.loss))
            .collect::<Result<_, _>>()?;
        let params: Vec<f32> = t
            .vars()
            .iter()
            .map(|v| {
                v.as_tensor()
                    .flatten_all()?
                    .to_device(&candle_core::Device::Cpu)?
                    .to_vec1::<f32>()
            })
            .collect::<Result<Vec<_>, _>>()?
            .concat();
        out.push((losses, params));
    }
    let max_diff = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max)
    };
    let (diff, loss_diff) = (
        max_diff(&out[0].1, &out[1].1),
        max_diff(&out[0].0, &out[1].0),
    );
    // Rounding differences can move a coordinate across the selection boundary, which changes that
    // parameter by about one AdamW step (lr); the losses must still agree closely.
    println!(
        "check cpu vs {device_name}: losses {:?} vs {:?}, max |loss diff| {loss_diff:.2e}, max |param diff| {diff:.2e} (lr 1e-3)",
        out[0].0, out[1].0
    );
    anyhow::ensure!(loss_diff < 1e-3, "CPU and {device_name} losses disagree");
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.check {
        check(&args.device)?;
    }
    let precision = if args.tf32 { "tf32" } else { "fp32" };
    println!(
        "# gradsparse {precision} on {}, batch {} x {}, global top-{} %, median of {} steps after {}",
        args.device,
        args.batch,
        args.context,
        args.density * 100.0,
        args.steps,
        args.warmup
    );
    println!("| impl | model | params N | k | step ms | fwd+bwd ms | residual add ms | select ms | sparse apply ms | EF overhead ms |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for model_name in &args.models {
        let toml = format!(
            "name = \"bench\"\n[model]\nname = \"{model_name}\"\ndevice = \"{}\"\ntf32 = {}\n[data]\nsynthetic = true\nbatch = {}\ncontext = {}\n[sparsify]\ndensity = {}\n[train]\nlr = 1e-4\nweight_decay = 0.0\nsteps = {}",
            args.device,
            args.tf32,
            args.batch,
            args.context,
            args.density,
            args.steps + args.warmup
        );
        let cfg = FinetuneConfig::from_toml(&toml).context("bench config")?;
        let device = device_of(&cfg.model.device)?;
        let model = build_model(&cfg, &device)?;
        let (batches, _) = Batches::from_config(&cfg, model.config().vocab_size)?;
        let mut trainer = Trainer::new(cfg, &model, batches)?;
        drop(model);
        for name in &args.selectors {
            let kind: Selector = serde_json::from_value(serde_json::Value::String(name.clone()))
                .with_context(|| format!("unknown selector {name}"))?;
            trainer.set_selector(SelectorChoice {
                kind,
                compare_with: None,
            });
            let mut reports: Vec<StepReport> = Vec::new();
            let mut failure = None;
            for i in 0..args.warmup + args.steps {
                match trainer.train_step() {
                    Ok(r) if i >= args.warmup => reports.push(r),
                    Ok(_) => {}
                    Err(e) => {
                        failure = Some(format!("step {i}: {e}"));
                        break;
                    }
                }
            }
            // A selector that fails (e.g. out of memory beside the training state) gets a row saying so.
            if let Some(why) = failure {
                println!(
                    "| gradsparse {name} | {model_name} | {} | - | failed: {why} | | | | | |",
                    trainer.layout().total()
                );
                continue;
            }
            let ms = |f: &dyn Fn(&StepReport) -> Duration| {
                median(reports.iter().map(|r| f(r).as_secs_f64() * 1e3).collect())
            };
            println!(
                "| gradsparse {name} | {model_name} | {} | {} | {:.1} | {:.1} | {:.2} | {:.2} | {:.2} | {:.2} |",
                trainer.layout().total(),
                reports.last().map_or(0, |r| r.k),
                ms(&|r| r.total),
                ms(&|r| r.forward_backward),
                ms(&|r| r.accumulate),
                ms(&|r| r.select),
                ms(&|r| r.apply),
                ms(&|r| r.overhead()),
            );
        }
    }
    Ok(())
}
