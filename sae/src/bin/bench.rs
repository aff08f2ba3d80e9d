//! `sae-bench`: step time of a BatchTopK SAE per selector, decoder form and precision, as a table, with
//! the peak device memory of the step (CUDA: the high-water mark of the stream-ordered pool).
//!
//! sae-bench --device cuda --d 1600 --shapes 65536x4096,131072x8192 --k 32 --precisions f32,tf32,bf16 \
//!     --dead 0,0.05,1 --aux-decodes auto
use candle_core::{DType, Device, Tensor};
use clap::Parser;
use rand::{Rng, SeedableRng};
use sae::config::{AuxDecode, DecodeMode, Precision, SelectorKind};
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
}

/// A BatchTopK config of n latents, k, batch b; `dead` tokens make a latent dead (0: all dead, aux-k on).
fn config(n: usize, b: usize, k: usize, cuda: bool, dead: u64) -> Config {
    let device = if cuda { "cuda" } else { "cpu" };
    let text = format!(
        "name = \"bench\"\ndevice = \"{device}\"\n[data]\nsource = \"synthetic\"\nd_model = 8\nfeatures = 8\n\
         active_per_token = 1\n[sae]\nlatents = {n}\nk = {k}\n[sae.aux]\ndead_tokens = {dead}\n\
         [train]\nbatch_size = {b}\nsteps = 1000\n"
    );
    Config::from_toml(&text).expect("bench config")
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
        activations::ops::keep_pool_memory(&device)?;
    }
    let selectors: Vec<SelectorKind> = parse(&a.selectors)?;
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
    println!(
        "| n | B | precision | selector | decode | aux dead | aux form | step ms | select ms | select share | peak GiB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let mut breakdown = Vec::new();
    for shape in a.shapes.split(',') {
        let (n, b) = shape
            .split_once('x')
            .ok_or_else(|| anyhow::anyhow!("shape {shape}: expected NxB"))?;
        let (n, b): (usize, usize) = (n.trim().parse()?, b.trim().parse()?);
        let x = Tensor::randn(0f32, 1f32, (b, 1, a.d), &device)?;
        // One model per shape and decoder form (initializing 2^17 × 1600 weights takes seconds); the
        // variants switch selector, precision and the dead set on it.
        for &decode in &decodes {
            let mut cfg = config(n, b, a.k, cuda, 0);
            cfg.sae.decode = decode;
            let mut t = sae::Trainer::new(cfg, &x, &device)?;
            t.profile = a.profile;
            for &prec in &precisions {
                #[cfg(feature = "cuda")]
                {
                    candle_core::cuda::set_gemm_reduced_precision_f32(prec == Precision::Tf32);
                    candle_core::cuda::set_gemm_reduced_precision_bf16(prec == Precision::Bf16);
                }
                t.cfg.train.precision = prec;
                t.sae.bf16_scores = prec == Precision::Bf16;
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
                        reset_peak(&device)?;
                        let mut times = Vec::new();
                        let mut sel_ms = Vec::new();
                        let mut stages: Vec<sae::trainer::Stages> = Vec::new();
                        let mut failed = None;
                        for i in 0..a.warmup + a.steps {
                            // The dead set stays fixed: latents that fire are dead again next step.
                            t.dead.since_fired = since.clone();
                            let t0 = Instant::now();
                            let s = match t.train_step(&x, false) {
                                Ok(s) => s,
                                Err(e) => {
                                    failed = Some(e);
                                    break;
                                }
                            };
                            device.synchronize()?;
                            if i >= a.warmup {
                                times.push(t0.elapsed().as_secs_f64() * 1e3);
                                sel_ms.push(s.select_ms);
                                stages.push(s.stages);
                            }
                        }
                        if let Some(e) = failed {
                            // One variant failing (out of memory, say) leaves the others to run.
                            println!(
                                "| {n} | {b} | {prec:?} | {} | - | {dead_label} | {form_label} | failed: {} | - | - | - |",
                                sel.name(),
                                e.to_string().lines().next().unwrap_or_default()
                            );
                            continue;
                        }
                        let (step, select) = (median(&mut times), median(&mut sel_ms));
                        let peak = peak_gib(&device)?;
                        println!(
                            "| {n} | {b} | {prec:?} | {} | {} | {dead_label} | {form_label} | {step:.2} | {select:.2} | {:.1} % | {peak} |",
                            sel.name(),
                            if t.sae.sparse { "sparse" } else { "dense" },
                            100.0 * select / step
                        );
                        if a.profile {
                            let m = |f: fn(&sae::trainer::Stages) -> f64| {
                                median(&mut stages.iter().map(f).collect::<Vec<_>>())
                            };
                            breakdown.push(format!(
                                "| {n} | {b} | {prec:?} | {} | {dead_label} | {form_label} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
                                sel.name(),
                                m(|s| s.scores),
                                m(|s| s.select),
                                m(|s| s.forward_rest),
                                m(|s| s.aux),
                                m(|s| s.backward),
                                m(|s| s.optimizer),
                                m(|s| s.bookkeeping),
                            ));
                        }
                    }
                }
            }
        }
    }
    if a.profile {
        println!("\nStage medians (ms), each stage waited for:\n");
        println!("| n | B | precision | selector | aux dead | aux form | scores | select | fwd rest | aux | backward | optimizer | bookkeeping |");
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for row in &breakdown {
            println!("{row}");
        }
    }
    Ok(())
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
        activations::ops::reset_pool_peak(_device)?;
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
            activations::ops::pool_peak_bytes(_device)? as f64 / (1u64 << 30) as f64
        ));
    }
    Ok("-".into())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}
