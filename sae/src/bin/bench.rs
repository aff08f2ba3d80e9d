//! `sae-bench`: step time of a BatchTopK SAE per selector, decoder form and precision, as a table, with
//! the peak device memory of the step (CUDA: the high-water mark of the stream-ordered pool).
//!
//! sae-bench --device cuda --d 1600 --shapes 65536x4096,131072x8192 --k 32 --precisions f32,tf32,bf16 --aux
use candle_core::{Device, Tensor};
use clap::Parser;
use sae::config::{DecodeMode, Precision, SelectorKind};
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
    /// Also time steps with every latent dead, so that the aux-k loss runs.
    #[arg(long)]
    aux: bool,
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
        sae::cuda::keep_pool_memory(&device)?;
    }
    let selectors: Vec<SelectorKind> = parse(&a.selectors)?;
    let precisions: Vec<Precision> = parse(&a.precisions)?;
    let decodes: Vec<DecodeMode> = parse(&a.decodes)?;
    println!(
        "| n | B | precision | selector | decode | aux | step ms | select ms | select share | peak GiB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
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
                    for aux in if a.aux {
                        vec![false, true]
                    } else {
                        vec![false]
                    } {
                        // 0 tokens: every latent is dead and the aux-k loss runs; else none is.
                        t.dead.dead_tokens = if aux { 0 } else { u64::MAX / 2 };
                        reset_peak(&device)?;
                        let mut times = Vec::new();
                        let mut sel_ms = Vec::new();
                        let mut stages: Vec<sae::trainer::Stages> = Vec::new();
                        let mut failed = None;
                        for i in 0..a.warmup + a.steps {
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
                                "| {n} | {b} | {prec:?} | {} | - | {} | failed: {} | - | - | - |",
                                sel.name(),
                                if aux { "on" } else { "off" },
                                e.to_string().lines().next().unwrap_or_default()
                            );
                            continue;
                        }
                        let (step, select) = (median(&mut times), median(&mut sel_ms));
                        let peak = peak_gib(&device)?;
                        println!(
                            "| {n} | {b} | {prec:?} | {} | {} | {} | {step:.2} | {select:.2} | {:.1} % | {peak} |",
                            sel.name(),
                            if t.sae.sparse { "sparse" } else { "dense" },
                            if aux { "on" } else { "off" },
                            100.0 * select / step
                        );
                        if a.profile {
                            let m = |f: fn(&sae::trainer::Stages) -> f64| {
                                median(&mut stages.iter().map(f).collect::<Vec<_>>())
                            };
                            breakdown.push(format!(
                                "| {n} | {b} | {prec:?} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
                                sel.name(),
                                if aux { "on" } else { "off" },
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
        println!("| n | B | precision | selector | aux | scores | select | fwd rest | aux | backward | optimizer | bookkeeping |");
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
        for row in &breakdown {
            println!("{row}");
        }
    }
    Ok(())
}

fn reset_peak(_device: &Device) -> anyhow::Result<()> {
    #[cfg(feature = "cuda")]
    if _device.is_cuda() {
        sae::cuda::reset_peak(_device)?;
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
            sae::cuda::peak_bytes(_device)? as f64 / (1u64 << 30) as f64
        ));
    }
    Ok("-".into())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}
