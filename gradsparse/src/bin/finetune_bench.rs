//! `finetune-bench`: step time of error-feedback sparsified AdamW on GPT-2-shaped random models, per
//! selector, as a markdown table in the columns of bench/peers/torch_ef_step.py.
//!
//!     finetune-bench [--models gpt2-medium,gpt2-xl] [--selectors profk,sort,radix] [--device cuda]
//!                    [--batch 4] [--context 512] [--density 1e-3] [--steps 8] [--warmup 3] [--ef-only]
//!
//! `--exchanges dense,sparse,global` adds a row per data-parallel exchange at world size 1 (through
//! NCCL on a CUDA device; the plain step is the first row), with the bytes each put on the wire.
//!
//! `--ef-only` times the error-feedback overhead alone on random gradients of the model's shapes
//! (no forward or backward): the fused update + Prof-K selection, and the separate update followed by
//! each selector, each with the sparse apply.
use anyhow::Context;
use clap::Parser;
use gradsparse::trainer::{build_model, device_of};
use gradsparse::{data::Batches, select::SelectorChoice};
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
    /// Time only the error-feedback overhead, on random gradients (no forward or backward).
    #[arg(long)]
    ef_only: bool,
    /// Data-parallel exchanges to time at world size 1 beside the plain step (dense, sparse, global).
    #[arg(long, value_delimiter = ',')]
    exchanges: Vec<String>,
}

/// Trains the tiny model a few steps on the CPU and on `device` from the same weights and prints the
/// losses and the largest parameter difference.
fn check(device_name: &str) -> anyhow::Result<()> {
    let toml = "name = \"check\"\n[data]\nsynthetic = true\ncontext = 32\n[train]\nbatch_size = 2\n[sparsify]\ndensity = 0.01\nmomentum_correction = true\n[selector]\ncompare = true";
    let cfg = FinetuneConfig::from_toml(toml)?;
    let base = build_model(&cfg, &candle_core::Device::Cpu)?;
    let device = device_of(device_name.parse().map_err(anyhow::Error::msg)?)?;
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

/// The error-feedback overhead alone: random gradients of each model's parameter shapes, the same
/// gradients every step; `fused` is the update folded into Prof-K's pass, the other rows run the
/// update as a pass of its own and then the named selector. Every stage is device-synchronized.
fn ef_only(args: &Args) -> anyhow::Result<()> {
    println!(
        "# error-feedback overhead on {}, random f32 gradients, global top-{} % by |residual + grad|, median of {} steps after {}",
        args.device,
        args.density * 100.0,
        args.steps,
        args.warmup
    );
    println!("| impl | model | params N | k | residual update ms | select ms | update + select ms | sparse apply ms | EF overhead ms |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for model_name in &args.models {
        let toml = format!(
            "name = \"bench\"\ndevice = \"{}\"\n[model]\nname = \"{model_name}\"\n[data]\nsynthetic = true\ncontext = 8\n[sparsify]\ndensity = {}\n[train]\nbatch_size = 1\nlr = 1e-4\nweight_decay = 0.0",
            args.device, args.density
        );
        let cfg = FinetuneConfig::from_toml(&toml).context("bench config")?;
        let device = device_of(cfg.device)?;
        let model = build_model(&cfg, &device)?;
        let (batches, _) = Batches::from_config(&cfg, model.config().vocab_size)?;
        let trainer = Trainer::new(cfg.clone(), &model, batches)?;
        drop(model);
        let layout = trainer.layout().clone();
        let grads: Vec<Option<candle_core::Tensor>> = layout
            .spans()
            .iter()
            .map(|s| candle_core::Tensor::randn(0f32, 1f32, s.shape.clone(), &device).map(Some))
            .collect::<Result<_, _>>()?;
        // As in a training step: the linear layers' weight gradients are already in the residual
        // (added by the backward's products through the gradient sinks), the others are passed.
        let sunk: Vec<Option<candle_core::Tensor>> = layout
            .spans()
            .iter()
            .zip(&grads)
            .map(|(s, g)| {
                if is_linear_weight(&s.name) {
                    None
                } else {
                    g.clone()
                }
            })
            .collect();
        let n = layout.total();
        let k = gradsparse::select::k_for(args.density, n);
        for (label, fused, kind, grads) in [
            (
                "fused profk, linear weights sunk",
                true,
                Selector::Profk,
                &sunk,
            ),
            ("fused profk", true, Selector::Profk, &grads),
            ("profk", false, Selector::Profk, &grads),
            ("radix", false, Selector::Radix, &grads),
            ("sort", false, Selector::Sort, &grads),
        ] {
            if !fused
                && !args
                    .selectors
                    .iter()
                    .any(|s| s == &format!("{kind:?}").to_lowercase())
            {
                continue;
            }
            let choice = SelectorChoice {
                kind,
                compare_with: None,
            };
            let mut ef = gradsparse::ErrorFeedback::new(layout.clone(), None, &device)?;
            let mut opt = gradsparse::SparseAdamW::new(cfg.adamw(), n, &device)?;
            let step = |i: usize| -> anyhow::Result<[f64; 3]> {
                device.synchronize()?;
                let t0 = std::time::Instant::now();
                let (update, sel) = if fused {
                    let sel = ef.accumulate_select(
                        grads,
                        args.density,
                        gradsparse::Scope::Global,
                        &choice,
                        i as u64,
                    )?;
                    (0.0, sel)
                } else {
                    ef.accumulate(grads)?;
                    device.synchronize()?;
                    let update = t0.elapsed().as_secs_f64();
                    let sel =
                        ef.select(args.density, gradsparse::Scope::Global, &choice, i as u64)?;
                    (update, sel)
                };
                device.synchronize()?;
                let t1 = std::time::Instant::now();
                opt.apply_selection(trainer.vars(), &mut ef, &sel, 1e-4)?;
                device.synchronize()?;
                let apply = t1.elapsed().as_secs_f64();
                Ok([update, (t1 - t0).as_secs_f64() - update, apply])
            };
            let rows = match timed_steps(args.warmup, args.steps, step) {
                Ok(rows) => rows,
                Err(why) => {
                    println!(
                        "| gradsparse {label} | {model_name} | {n} | {k} | failed: {why} | | | | |"
                    );
                    continue;
                }
            };
            let ms = |j: usize| median(rows.iter().map(|r| r[j] * 1e3).collect());
            let (update, select, apply) = (ms(0), ms(1), ms(2));
            let both = median(rows.iter().map(|r| (r[0] + r[1]) * 1e3).collect());
            let total = median(rows.iter().map(|r| (r[0] + r[1] + r[2]) * 1e3).collect());
            let update_cell = if fused {
                "(fused)".to_string()
            } else {
                format!("{update:.2}")
            };
            let select_cell = if fused {
                "(fused)".to_string()
            } else {
                format!("{select:.2}")
            };
            println!(
                "| gradsparse {label} | {model_name} | {n} | {k} | {update_cell} | {select_cell} | {both:.2} | {apply:.2} | {total:.2} |"
            );
        }
        #[cfg(feature = "cuda")]
        if device.is_cuda() {
            pass_only(
                args,
                &layout,
                &sunk,
                &device,
                model_name,
                "linear weights sunk",
            )?;
            pass_only(args, &layout, &grads, &device, model_name, "every gradient")?;
            sample_sweep(args, &layout, &grads, &device, model_name)?;
        }
    }
    Ok(())
}

/// GPT-2's linear layers' weights (`h.N.attn.c_attn.weight`, ...), whose gradients a training step adds
/// into the residual in the backward pass.
fn is_linear_weight(name: &str) -> bool {
    name.ends_with(".weight") && (name.contains(".attn.c_") || name.contains(".mlp.c_"))
}

/// Where the fused call's time goes: the same call with every launch after the pass left out
/// (sample + fused update-and-filter pass only; its selection is not meaningful, so nothing is applied).
#[cfg(feature = "cuda")]
fn pass_only(
    args: &Args,
    layout: &gradsparse::FlatLayout,
    grads: &[Option<candle_core::Tensor>],
    device: &candle_core::Device,
    model_name: &str,
    label: &str,
) -> anyhow::Result<()> {
    let choice = SelectorChoice {
        kind: Selector::Profk,
        compare_with: None,
    };
    let mut ef = gradsparse::ErrorFeedback::new(layout.clone(), None, device)?;
    let mut times = Vec::new();
    for i in 0..args.warmup + args.steps {
        let sel = profk::tuning::scoped(profk::Tuning::first_attempt_only(), || {
            ef.accumulate_select(
                grads,
                args.density,
                gradsparse::Scope::Global,
                &choice,
                i as u64,
            )
        })?;
        if i >= args.warmup {
            times.push(sel.time.as_secs_f64() * 1e3);
        }
    }
    println!(
        "| gradsparse fused profk, {label}, sample + pass only | {model_name} | {} | {} | (fused) | (fused) | {:.2} | - | - |",
        layout.total(),
        gradsparse::select::k_for(args.density, layout.total()),
        median(times)
    );
    Ok(())
}

/// The results of steps `warmup..warmup + steps` of `step` (given the step number), or the first
/// failure as the message of a failed row.
fn timed_steps<T, E: std::fmt::Display>(
    warmup: usize,
    steps: usize,
    mut step: impl FnMut(usize) -> Result<T, E>,
) -> Result<Vec<T>, String> {
    let mut kept = Vec::with_capacity(steps);
    for i in 0..warmup + steps {
        match step(i) {
            Ok(r) if i >= warmup => kept.push(r),
            Ok(_) => {}
            Err(e) => return Err(format!("step {i}: {e}")),
        }
    }
    Ok(kept)
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
    if args.ef_only {
        return ef_only(&args);
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
            "name = \"bench\"\ndevice = \"{0}\"\n[model]\nname = \"{model_name}\"\ntf32 = {1}\n[data]\nsynthetic = true\ncontext = {3}\n[sparsify]\ndensity = {4}\n[train]\nbatch_size = {2}\nlr = 1e-4\nweight_decay = 0.0\nsteps = {5}",
            args.device,
            args.tf32,
            args.batch,
            args.context,
            args.density,
            args.steps + args.warmup
        );
        let cfg = FinetuneConfig::from_toml(&toml).context("bench config")?;
        let device = device_of(cfg.device)?;
        let model = build_model(&cfg, &device)?;
        let (batches, _) = Batches::from_config(&cfg, model.config().vocab_size)?;
        let mut trainer = Trainer::new(cfg.clone(), &model, batches.clone())?;
        for name in &args.selectors {
            let kind: Selector = serde_json::from_value(serde_json::Value::String(name.clone()))
                .with_context(|| format!("unknown selector {name}"))?;
            trainer.set_selector(SelectorChoice {
                kind,
                compare_with: None,
            });
            // A selector that fails (e.g. out of memory beside the training state) gets a row saying so.
            let reports = timed_steps(args.warmup, args.steps, |_| trainer.train_step());
            let reports: Vec<StepReport> = match reports {
                Ok(reports) => reports,
                Err(why) => {
                    println!(
                        "| gradsparse {name} | {model_name} | {} | - | failed: {why} | | | | | |",
                        trainer.layout().total()
                    );
                    continue;
                }
            };
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
        drop(trainer);
        if !args.exchanges.is_empty() {
            exchanges(&args, &cfg, &model, &batches, model_name)?;
        }
    }
    Ok(())
}

/// One row per exchange at world size 1 (rank 0 of 1 through NCCL on CUDA): the step, its time in
/// collectives and its bytes on the wire beside the dense all-reduce's.
fn exchanges(
    args: &Args,
    cfg: &FinetuneConfig,
    model: &gpt2::Gpt2,
    batches: &Batches,
    model_name: &str,
) -> anyhow::Result<()> {
    let mut dist = cfg.distributed.clone();
    dist.mode = collective::DistributedMode::Data;
    let group = gradsparse::distributed::join(&dist, model.device())?
        .context("a distributed mode joins a group")?;
    println!();
    println!(
        "| exchange, world 1 | model | step ms | collective ms | wire MB | dense MB | ratio |"
    );
    println!("|---|---|---|---|---|---|---|");
    for name in &args.exchanges {
        let exchange: collective::GradientExchange =
            serde_json::from_value(serde_json::Value::String(name.clone()))
                .with_context(|| format!("unknown exchange {name}"))?;
        let mut group = group.clone();
        group.exchange = exchange;
        let mut trainer = Trainer::with_group(cfg.clone(), model, batches.clone(), Some(group))?;
        let reports = match timed_steps(args.warmup, args.steps, |_| trainer.train_step()) {
            Ok(reports) => reports,
            Err(why) => {
                println!("| {name} | {model_name} | failed: {why} | | | | |");
                continue;
            }
        };
        let ms = |f: &dyn Fn(&StepReport) -> f64| median(reports.iter().map(f).collect());
        let wire = |r: &StepReport| r.wire.unwrap_or_default();
        println!(
            "| {name} | {model_name} | {:.1} | {:.2} | {:.2} | {:.1} | {:.0} |",
            ms(&|r| r.total.as_secs_f64() * 1e3),
            ms(&|r| wire(r).collective.as_secs_f64() * 1e3),
            ms(&|r| wire(r).sent as f64 / 1e6),
            ms(&|r| wire(r).dense as f64 / 1e6),
            ms(&|r| wire(r).ratio()),
        );
    }
    Ok(())
}

/// The fused update + selection with larger samples than the default rule's: a tighter threshold keeps
/// fewer candidates (less to write in the pass and to select after it) for more sampled reads.
#[cfg(feature = "cuda")]
fn sample_sweep(
    args: &Args,
    layout: &gradsparse::FlatLayout,
    grads: &[Option<candle_core::Tensor>],
    device: &candle_core::Device,
    model_name: &str,
) -> anyhow::Result<()> {
    let n = layout.total();
    let k = gradsparse::select::k_for(args.density, n);
    let spans = profk::FlatSpans::new(layout.spans().iter().map(|s| s.len));
    let residual = candle_core::Tensor::zeros(n, candle_core::DType::F32, device)?;
    let opts = profk::TopKOptions {
        order: profk::Order::Index,
        by_magnitude: true,
        ..Default::default()
    };
    for sample in [1u64 << 14, 1 << 16, 1 << 18, 1 << 20] {
        if sample * 64 > n as u64 {
            continue;
        }
        let plan: profk::Plan =
            profk::params::exact(n as u64, k as u64, opts.eps, Some(sample))?.into();
        let acc = profk::Accumulation {
            residual: &residual,
            grads,
            velocity: None,
            momentum: 0.0,
        };
        let (mut times, mut retained) = (Vec::new(), 0);
        for i in 0..args.warmup + args.steps {
            device.synchronize()?;
            let t0 = std::time::Instant::now();
            let top = profk::accumulate::topk_accumulate_with_plan(&spans, &acc, k, &opts, plan)?;
            device.synchronize()?;
            if i >= args.warmup {
                times.push(t0.elapsed().as_secs_f64() * 1e3);
                retained = top.stats.retained;
            }
        }
        println!(
            "| gradsparse fused profk, S = {sample}, t = {}, M = {}, R = {retained} | {model_name} | {n} | {k} | (fused) | (fused) | {:.2} | - | - |",
            plan.t,
            plan.capacity,
            median(times)
        );
    }
    Ok(())
}
