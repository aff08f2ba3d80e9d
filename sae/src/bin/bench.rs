//! `sae-bench`: step time of a BatchTopK SAE per selector, decoder form and precision, as a table, with
//! the peak device memory of the step (CUDA: the high-water mark of the stream-ordered pool).
//!
//! sae-bench --device cuda --d 1600 --shapes 65536x4096,131072x8192 --k 32 --precisions f32,tf32,bf16 \
//!     --dead 0,0.05,1 --aux-decodes auto
//!
//! With `--archs matryoshka,crosscoder` it prints instead each architecture's step beside BatchTopK's of
//! the same input width and (n, B): Matryoshka over d (groups n/32, n/16, n/8 and the rest: 2048, 4096,
//! 8192, 51200 at n = 2^16) against BatchTopK over d, the crosscoder over `--layers` × d against
//! BatchTopK over layers·d (the same inputs, stacked).
use candle_core::{DType, Device, Tensor};
use clap::Parser;
use profk::Selector;
use rand::{Rng, SeedableRng};
use sae::config::{Arch, AuxDecode, DecodeMode, Precision};
use sae::model::{Sae, Shape};
use sae::Config;
use std::time::Instant;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "cpu")]
    device: String,
    #[arg(long, default_value_t = 1600)]
    d: usize,
    /// Comma-separated n×B pairs.
    #[arg(long, default_value = "65536x4096,131072x8192")]
    shapes: String,
    #[arg(long, default_value_t = 32)]
    k: usize,
    #[arg(long, default_value = "profk,sort,radix")]
    selectors: String,
    /// f32, tf32, bf16 (the last two CUDA only).
    #[arg(long, default_value = "f32")]
    precisions: String,
    /// auto, sparse, dense.
    #[arg(long, default_value = "auto")]
    decodes: String,
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    #[arg(long, default_value_t = 10)]
    steps: usize,
    /// Fractions of the latents held dead (a fixed random set), so that the aux-k loss runs; 0: none.
    #[arg(long, default_value = "0")]
    dead: String,
    /// Shorthand for `--dead 0,1`.
    #[arg(long)]
    aux: bool,
    /// Forms of the aux-k loss: auto, sparse, dense.
    #[arg(long, default_value = "auto")]
    aux_decodes: String,
    /// Also print the stage times (the device is waited for after each stage, which adds a little).
    #[arg(long)]
    profile: bool,
    /// batchtopk (the main table), or architectures to set beside BatchTopK: matryoshka, crosscoder.
    #[arg(long, default_value = "batchtopk")]
    archs: String,
    /// Layers of the crosscoder (each of `--d` inputs).
    #[arg(long, default_value_t = 3)]
    layers: usize,
    /// Storage of Adam's moments: f32 or bf16 (`train.moments`).
    #[arg(long, default_value = "f32")]
    moments: String,
}

/// A BatchTopK config of n latents, k, batch b; `dead` tokens make a latent dead (0: all dead, aux-k on).
fn config(n: usize, b: usize, k: usize, cuda: bool, dead: u64) -> Config {
    arch_config(Arch::Batchtopk, 1, (n, b, k), cuda, dead).expect("bench config")
}

/// The config of `arch` over `layers` inputs (Matryoshka: the groups of [`matryoshka_groups`]).
fn arch_config(
    arch: Arch,
    layers: usize,
    (n, b, k): (usize, usize, usize),
    cuda: bool,
    dead: u64,
) -> anyhow::Result<Config> {
    let device = if cuda { "cuda" } else { "cpu" };
    let (name, groups) = match arch {
        Arch::Batchtopk => ("batchtopk", String::new()),
        Arch::Matryoshka => (
            "matryoshka",
            format!("group_sizes = {:?}\n", matryoshka_groups(n)?),
        ),
        Arch::Crosscoder => ("crosscoder", String::new()),
    };
    let text = format!(
        "name = \"bench\"\ndevice = \"{device}\"\n[data]\nsource = \"synthetic\"\nd_model = 8\nlayers = {layers}\n\
         features = 8\nactive_per_token = 1\n[sae]\narch = \"{name}\"\nlatents = {n}\nk = {k}\n{groups}\
         [sae.aux]\ndead_tokens = {dead}\n[train]\nbatch_size = {b}\nsteps = 1000\n"
    );
    Ok(Config::from_toml(&text)?)
}

/// The benchmark's Matryoshka groups: n/32, n/16, n/8 and the rest (2048, 4096, 8192, 51200 at 2^16).
fn matryoshka_groups(n: usize) -> anyhow::Result<Vec<usize>> {
    let head = [n / 32, n / 16, n / 8];
    if head[0] == 0 {
        anyhow::bail!("matryoshka groups n/32, n/16, n/8, rest need n ≥ 32, not {n}");
    }
    Ok(vec![
        head[0],
        head[1],
        head[2],
        n - head.iter().sum::<usize>(),
    ])
}

fn parse<T: serde::de::DeserializeOwned>(list: &str) -> anyhow::Result<Vec<T>> {
    list.split(',')
        .map(|s| Ok(serde_json::from_str(&format!("\"{}\"", s.trim()))?))
        .collect()
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let device = match a.device.as_str() {
        "cpu" => Device::Cpu,
        _ => Device::new_cuda(0)?,
    };
    let cuda = device.is_cuda();
    #[cfg(feature = "cuda")]
    if cuda {
        gpt2::ops::keep_pool_memory(&device)?;
    }
    let selectors: Vec<Selector> = parse(&a.selectors)?;
    let precisions: Vec<Precision> = parse(&a.precisions)?;
    let decodes: Vec<DecodeMode> = parse(&a.decodes)?;
    let aux_decodes: Vec<AuxDecode> = parse(&a.aux_decodes)?;
    let fractions: Vec<f64> = if a.aux {
        vec![0.0, 1.0]
    } else {
        a.dead
            .split(',')
            .map(|f| f.trim().parse::<f64>())
            .collect::<Result<_, _>>()?
    };
    if let Some(f) = fractions.iter().find(|f| !(0.0..=1.0).contains(*f)) {
        anyhow::bail!("--dead: {f} is not a fraction in [0, 1]");
    }
    let archs: Vec<Arch> = parse(&a.archs)?;
    // The aux variants: (dead fraction, form); no form without dead latents.
    let variants: Vec<(f64, AuxDecode)> = fractions
        .iter()
        .flat_map(|&f| {
            let forms = if f == 0.0 {
                vec![AuxDecode::Auto]
            } else {
                aux_decodes.clone()
            };
            forms.into_iter().map(move |form| (f, form))
        })
        .collect();
    if archs.iter().any(|&arch| arch != Arch::Batchtopk) {
        let setup = Setup {
            device: &device,
            precisions: &precisions,
            selectors: &selectors,
            variants: &variants,
        };
        return compare_archs(&a, &archs, &setup);
    }
    println!(
        "| n | B | precision | selector | decode | aux dead | aux form | step ms | select ms | select share | peak GiB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let mut breakdown = Vec::new();
    for shape in a.shapes.split(',') {
        let (n, b) = parse_shape(shape)?;
        let x = Tensor::randn(0f32, 1f32, (b, 1, a.d), &device)?;
        // One model per shape and decoder form (initializing 2^17 × 1600 weights takes seconds); the
        // variants switch selector, precision and the dead set on it.
        for &decode in &decodes {
            let mut cfg = config(n, b, a.k, cuda, 0);
            cfg.sae.decode = decode;
            let mut t = sae::Trainer::new(cfg, &x, &device)?;
            t.profile = a.profile;
            set_moments(&mut t, &a.moments)?;
            for &prec in &precisions {
                set_precision(&mut t, prec);
                for &sel in &selectors {
                    t.cfg.selector.kind = sel;
                    for &(fraction, form) in &variants {
                        t.cfg.sae.aux.decode = form;
                        let (since, n_dead) = dead_pattern(n, fraction, &device)?;
                        t.dead.dead_tokens = DEAD_TOKENS;
                        let aux = n_dead > 0;
                        let dead_label = if aux {
                            format!("{:.0} %", 100.0 * fraction)
                        } else {
                            "off".into()
                        };
                        let form_label = form_label(&t, form, b, n_dead, a.d);
                        let timing = match time_steps(
                            &mut t,
                            &x,
                            &since,
                            (a.warmup, a.steps),
                            &device,
                        )? {
                            Ok(timing) => timing,
                            Err(e) => {
                                // One variant failing (out of memory, say) leaves the others to run.
                                println!(
                                    "| {n} | {b} | {prec:?} | {} | - | {dead_label} | {form_label} | failed: {} | - | - | - |",
                                    sel.name(),
                                    first_line(&e)
                                );
                                continue;
                            }
                        };
                        let Timing {
                            step,
                            select,
                            peak,
                            stages,
                        } = timing;
                        println!(
                            "| {n} | {b} | {prec:?} | {} | {} | {dead_label} | {form_label} | {step:.2} | {select:.2} | {:.1} % | {peak} |",
                            sel.name(),
                            if t.sae.sparse { "sparse" } else { "dense" },
                            100.0 * select / step
                        );
                        if a.profile {
                            breakdown.push(format!(
                                "| {n} | {b} | {prec:?} | {} | {dead_label} | {form_label} | {} |",
                                sel.name(),
                                stage_cells(&stages)
                            ));
                        }
                    }
                }
            }
        }
    }
    if a.profile {
        print_stage_table("| n | B | precision | selector | aux dead | aux form | scores | select | fwd rest | aux | backward | optimizer | bookkeeping |", &breakdown);
    }
    Ok(())
}

/// Medians of a variant's timed steps.
struct Timing {
    step: f64,
    select: f64,
    peak: String,
    stages: Vec<sae::trainer::Stages>,
}

/// `warmup`, then `steps` timed training steps on `x` with the dead set held at the counters `since`
/// (latents that fire are dead again next step); the step's error when one fails.
fn time_steps(
    t: &mut sae::Trainer,
    x: &Tensor,
    since: &Tensor,
    (warmup, steps): (usize, usize),
    device: &Device,
) -> anyhow::Result<Result<Timing, sae::Error>> {
    reset_peak(device)?;
    let mut times = Vec::new();
    let mut sel_ms = Vec::new();
    let mut stages = Vec::new();
    for i in 0..warmup + steps {
        t.dead.since_fired = since.clone();
        let t0 = Instant::now();
        let s = match t.train_step(x, false) {
            Ok(s) => s,
            Err(e) => return Ok(Err(e)),
        };
        device.synchronize()?;
        if i >= warmup {
            times.push(t0.elapsed().as_secs_f64() * 1e3);
            sel_ms.push(s.select_ms);
            stages.push(s.stages);
        }
    }
    Ok(Ok(Timing {
        step: median(&mut times),
        select: median(&mut sel_ms),
        peak: peak_gib(device)?,
        stages,
    }))
}

fn first_line(e: &sae::Error) -> String {
    e.to_string().lines().next().unwrap_or_default().to_string()
}

/// What every architecture row runs over: the device and the variants of the main table.
struct Setup<'a> {
    device: &'a Device,
    precisions: &'a [Precision],
    selectors: &'a [Selector],
    variants: &'a [(f64, AuxDecode)],
}

/// One architecture at one input layout: `layers` × `d_model`.
#[derive(Clone, Copy, PartialEq)]
struct Model {
    arch: Arch,
    layers: usize,
    d_model: usize,
}

impl Model {
    fn d_in(&self) -> usize {
        self.layers * self.d_model
    }

    fn name(&self) -> String {
        match self.arch {
            Arch::Batchtopk => format!("batchtopk {}", self.d_in()),
            Arch::Matryoshka => format!("matryoshka {}", self.d_model),
            Arch::Crosscoder => format!("crosscoder {}×{}", self.layers, self.d_model),
        }
    }
}

/// Each architecture of `archs` beside BatchTopK of the same input width, (n, B), precision, selector
/// and dead set: a table of both step times and their ratio. Models start from unit-norm random
/// decoder rows drawn on the device (W_enc = W_decᵀ, zero biases): the same recipe for both sides, and
/// no seconds of host sampling per model.
fn compare_archs(a: &Args, archs: &[Arch], setup: &Setup) -> anyhow::Result<()> {
    let device = setup.device;
    let cuda = device.is_cuda();
    println!(
        "| arch | n | B | d_in | precision | selector | aux dead | step ms | BatchTopK ms | ratio | select ms | peak GiB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut breakdown = Vec::new();
    let mut pairs: Vec<(Model, Model)> = Vec::new();
    for &arch in archs {
        let layers = if arch == Arch::Crosscoder {
            a.layers
        } else {
            1
        };
        let model = Model {
            arch,
            layers,
            d_model: a.d,
        };
        let base = Model {
            arch: Arch::Batchtopk,
            layers: 1,
            d_model: model.d_in(),
        };
        if arch != Arch::Batchtopk {
            pairs.push((base, model));
        }
    }
    for shape in a.shapes.split(',') {
        let (n, b) = parse_shape(shape)?;
        // The same inputs for every model: [B, layers, d] for the crosscoder, stacked for the rest.
        let raw = Tensor::randn(0f32, 1f32, (b, a.layers.max(1) * a.d), device)?;
        let mut measured: Vec<(Model, String, String, Timing)> = Vec::new();
        for &(base, model) in &pairs {
            for m in [base, model] {
                if measured.iter().any(|(seen, ..)| *seen == m) {
                    continue;
                }
                let x = raw
                    .narrow(1, 0, m.d_in())?
                    .contiguous()?
                    .reshape((b, m.layers, m.d_model))?;
                let mut t = arch_trainer(m, (n, b, a.k), cuda, device)?;
                t.profile = a.profile;
                set_moments(&mut t, &a.moments)?;
                for &prec in setup.precisions {
                    set_precision(&mut t, prec);
                    for &sel in setup.selectors {
                        t.cfg.selector.kind = sel;
                        for &(fraction, form) in setup.variants {
                            t.cfg.sae.aux.decode = form;
                            let (since, n_dead) = dead_pattern(n, fraction, device)?;
                            t.dead.dead_tokens = DEAD_TOKENS;
                            let dead_label = if n_dead > 0 {
                                format!(
                                    "{:.0} % ({})",
                                    100.0 * fraction,
                                    form_label(&t, form, b, n_dead, m.d_in())
                                )
                            } else {
                                "off".into()
                            };
                            let key = format!("{prec:?} | {}", sel.name());
                            match time_steps(&mut t, &x, &since, (a.warmup, a.steps), device)? {
                                Ok(timing) => measured.push((m, key, dead_label, timing)),
                                Err(e) => println!(
                                    "| {} | {n} | {b} | {} | {key} | {dead_label} | failed: {} | - | - | - | - |",
                                    m.name(),
                                    m.d_in(),
                                    first_line(&e)
                                ),
                            }
                        }
                    }
                }
            }
        }
        for &(base, model) in &pairs {
            for (m, key, dead, timing) in &measured {
                if *m != model {
                    continue;
                }
                let reference = measured
                    .iter()
                    .find(|(r, k, dd, _)| *r == base && k == key && dd == dead)
                    .map(|(.., t)| t.step);
                let (base_ms, ratio) = match reference {
                    Some(r) => (format!("{r:.2}"), format!("{:.2}", timing.step / r)),
                    None => ("-".into(), "-".into()),
                };
                println!(
                    "| {} | {n} | {b} | {} | {key} | {dead} | {:.2} | {base_ms} | {ratio} | {:.2} | {} |",
                    model.name(),
                    model.d_in(),
                    timing.step,
                    timing.select,
                    timing.peak
                );
            }
        }
        if a.profile {
            for (m, key, dead, timing) in &measured {
                breakdown.push(format!(
                    "| {} | {n} | {b} | {key} | {dead} | {} |",
                    m.name(),
                    stage_cells(&timing.stages)
                ));
            }
        }
    }
    if a.profile {
        print_stage_table("| arch | n | B | precision | selector | aux dead | scores | select | fwd rest | aux | backward | optimizer | bookkeeping |", &breakdown);
    }
    Ok(())
}

/// The stage medians of every variant under `header`, a table of 13 columns.
fn print_stage_table(header: &str, rows: &[String]) {
    println!("\nStage medians (ms), each stage waited for:\n");
    println!("{header}");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for row in rows {
        println!("{row}");
    }
}

/// The medians of every stage, as table cells.
fn stage_cells(stages: &[sae::trainer::Stages]) -> String {
    let m =
        |f: fn(&sae::trainer::Stages) -> f64| median(&mut stages.iter().map(f).collect::<Vec<_>>());
    format!(
        "{:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2}",
        m(|s| s.scores),
        m(|s| s.select),
        m(|s| s.forward_rest),
        m(|s| s.aux),
        m(|s| s.backward),
        m(|s| s.optimizer),
        m(|s| s.bookkeeping),
    )
}

/// A trainer of `m` with n latents, k, batch b, from unit-norm random decoder rows drawn on the device.
fn arch_trainer(
    m: Model,
    (n, b, k): (usize, usize, usize),
    cuda: bool,
    device: &Device,
) -> anyhow::Result<sae::Trainer> {
    let cfg = arch_config(m.arch, m.layers, (n, b, k), cuda, 0)?;
    let d_in = m.d_in();
    let w = Tensor::randn(0f32, 1f32, (n, d_in), device)?;
    let w = w.broadcast_div(&w.sqr()?.sum_keepdim(1)?.sqrt()?)?;
    let shape = Shape {
        arch: m.arch,
        d_model: m.d_model,
        layers: m.layers,
        n,
        k,
        groups: cfg.sae.group_sizes.clone(),
    };
    let zeros = |len: usize| Tensor::zeros(len, DType::F32, device);
    let sae = Sae::from_rows(shape, [&w, &zeros(n)?, &w, &zeros(d_in)?], cfg.sae.decode)?;
    Ok(sae::Trainer::with_sae(cfg, sae, vec![1.0; m.layers])?)
}

/// `NxB` as (n, B).
fn parse_shape(shape: &str) -> anyhow::Result<(usize, usize)> {
    let (n, b) = shape
        .split_once('x')
        .ok_or_else(|| anyhow::anyhow!("shape {shape}: expected NxB"))?;
    Ok((n.trim().parse()?, b.trim().parse()?))
}

/// Fresh Adam moments stored as `moments` (`f32` or `bf16`).
fn set_moments(t: &mut sae::Trainer, moments: &str) -> anyhow::Result<()> {
    let [moments] = parse::<sae::config::Moments>(moments)?[..] else {
        anyhow::bail!("--moments: one of f32, bf16");
    };
    t.cfg.train.moments = moments;
    t.adam = sae::optim::Adam::new(&t.sae.vars(), &t.cfg.train)?;
    Ok(())
}

/// The trainer and the device's matmuls set to `prec`.
fn set_precision(t: &mut sae::Trainer, prec: Precision) {
    #[cfg(feature = "cuda")]
    {
        candle_core::cuda::set_gemm_reduced_precision_f32(prec == Precision::Tf32);
        candle_core::cuda::set_gemm_reduced_precision_bf16(prec == Precision::Bf16);
    }
    t.cfg.train.precision = prec;
    t.sae.bf16_scores = prec == Precision::Bf16;
    t.sae.tf32_scores = prec == Precision::Tf32;
}

/// Tokens without firing that make a latent dead in the bench; the dead set's counters sit above it.
const DEAD_TOKENS: u64 = 1 << 40;

/// Tokens-since-fired counters [n] (f64) that hold a fixed random `fraction` of the latents dead (all of
/// them at 1), and the dead count.
fn dead_pattern(n: usize, fraction: f64, device: &Device) -> anyhow::Result<(Tensor, usize)> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let since: Vec<f64> = (0..n)
        .map(|_| {
            let dead = fraction >= 1.0 || rng.random::<f64>() < fraction;
            if dead {
                2.0 * DEAD_TOKENS as f64
            } else {
                0.0
            }
        })
        .collect();
    let n_dead = since.iter().filter(|&&v| v > 0.0).count();
    Ok((
        Tensor::from_vec(since, n, device)?.to_dtype(DType::F64)?,
        n_dead,
    ))
}

/// The aux form as run: `auto` names the form its cost rule picks.
fn form_label(t: &sae::Trainer, form: AuxDecode, batch: usize, n_dead: usize, d: usize) -> String {
    if n_dead == 0 {
        return "-".into();
    }
    let keep = (d / 2).max(1).min(n_dead);
    let dense = sae::aux_dense::prefer_dense(
        batch,
        keep,
        n_dead,
        d,
        sae::aux_dense::flops_per_byte(&t.sae),
    );
    let picked = if dense { "dense" } else { "sparse" };
    match form {
        AuxDecode::Auto => format!("auto: {picked}"),
        AuxDecode::Sparse => "sparse".into(),
        AuxDecode::Dense => "dense".into(),
    }
}

fn reset_peak(_device: &Device) -> anyhow::Result<()> {
    #[cfg(feature = "cuda")]
    if _device.is_cuda() {
        gpt2::ops::reset_pool_peak(_device)?;
    }
    Ok(())
}

/// Peak pool memory since the last reset, in GiB ("-" on the CPU).
fn peak_gib(_device: &Device) -> anyhow::Result<String> {
    #[cfg(feature = "cuda")]
    if _device.is_cuda() {
        _device.synchronize()?;
        return Ok(format!(
            "{:.1}",
            gpt2::ops::pool_peak_bytes(_device)? as f64 / (1u64 << 30) as f64
        ));
    }
    Ok("-".into())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}
