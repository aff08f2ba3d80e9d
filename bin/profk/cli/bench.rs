//! `profk bench`: times Prof-K against the baselines and the memory floor, and prints one table.
use anyhow::{bail, Context};
use candle_core::{DType, Device, Tensor};
use profk::{params, topk, topk_with_plan, Plan, Selector, TopKOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct BenchArgs {
    /// cpu or cuda.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    #[command(flatten)]
    pub cpu: CpuBenchArgs,
    #[command(flatten)]
    pub cuda: super::bench_cuda::CudaBenchArgs,
}

/// Options of the CPU benchmark (the element type is `--dtype`).
#[derive(clap::Args, Clone, Debug)]
pub struct CpuBenchArgs {
    /// Row lengths N, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "67108864")]
    pub n: Vec<usize>,
    /// Values of k, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "64,1024,16384")]
    pub k: Vec<usize>,
    /// Rows per input (row-wise selection; N is the length of one row).
    #[arg(long, default_value_t = 1)]
    pub rows: usize,
    /// Timed calls of Prof-K and the passes (the median is reported).
    #[arg(long, default_value_t = 7)]
    pub reps: usize,
    /// Timed calls of the `select` and `sort` baselines.
    #[arg(long, default_value_t = 1)]
    pub baseline_reps: usize,
    /// Leave out the full sort (10 s per call at N = 2^26).
    #[arg(long)]
    pub skip_sort: bool,
    /// Leave out `select`.
    #[arg(long)]
    pub skip_select: bool,
    /// Sample sizes S to time Prof-K with (exact t and M for each), instead of the default rule.
    #[arg(long, value_delimiter = ',')]
    pub sample: Vec<u64>,
}

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.device.as_str() {
        "cuda" => super::bench_cuda::run(&args.cuda),
        "cpu" => run_cpu(&args.cpu, &args.cuda.dtype),
        other => bail!("--device {other}: expected cpu or cuda"),
    }
}

fn run_cpu(args: &CpuBenchArgs, dtype: &str) -> anyhow::Result<()> {
    let dtype = match dtype {
        "f32" => DType::F32,
        "f64" => DType::F64,
        "f16" => DType::F16,
        "bf16" => DType::BF16,
        other => bail!("--dtype {other}: expected f32, f64, f16 or bf16"),
    };
    if args.reps == 0 || args.baseline_reps == 0 {
        bail!("--reps and --baseline-reps must be at least 1");
    }
    println!(
        "# CPU, {} rayon threads, {} row(s) of standard normal {dtype:?}, medians of {} (baselines {}) calls",
        rayon::current_num_threads(),
        args.rows,
        args.reps,
        args.baseline_reps
    );
    println!(
        "| N | k | profk ms | select ms | sort ms | plain pass ms | read ms | vs select | vs sort | / plain | attempts | S | t | M | sample/filter/select ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for &n in &args.n {
        let x = normal_input(args.rows, n, dtype)
            .with_context(|| format!("building an input of {n}"))?;
        // The floors are measured on f32, the dtype of the goal.
        let (plain, read) = if dtype == DType::F32 {
            (
                Some(median(args.reps, || plain_pass(&x))?),
                Some(median(args.reps, || parallel_read(&x))?),
            )
        } else {
            (None, None)
        };
        for &k in &args.k {
            if k > n {
                bail!("k = {k} exceeds N = {n}");
            }
            let profk_opts = TopKOptions::default();
            let plans: Vec<Option<Plan>> = if args.sample.is_empty() {
                vec![None]
            } else {
                let eps = profk_opts.eps / args.rows as f64;
                let plan = |s: u64| {
                    params::exact(n as u64, k as u64, eps, Some(s)).map(|p| Some(p.into()))
                };
                args.sample
                    .iter()
                    .map(|&s| plan(s))
                    .collect::<profk::Result<_>>()?
            };
            for plan in plans {
                let call = || match plan {
                    Some(plan) => topk_with_plan(&x, k, &profk_opts, plan),
                    None => topk(&x, k, &profk_opts),
                };
                let warm = call()?; // computes and memoizes the parameters
                let mut attempts = warm.stats.attempts;
                let mut last = warm.stats.clone();
                let profk_ms = median(args.reps, || {
                    last = call()?.stats;
                    attempts = attempts.max(last.attempts);
                    Ok(())
                })?;
                let stage_ms = |d: Duration| d.as_secs_f64() * 1e3;
                let baseline = |selector: Selector, skip: bool| -> anyhow::Result<Option<f64>> {
                    if skip {
                        return Ok(None);
                    }
                    let opts = TopKOptions {
                        selector,
                        ..TopKOptions::default()
                    };
                    let ms = median(args.baseline_reps, || {
                        topk(&x, k, &opts).map(drop).map_err(Into::into)
                    })?;
                    Ok(Some(ms))
                };
                let select_ms = baseline(Selector::Select, args.skip_select)?;
                let sort_ms = baseline(Selector::Sort, args.skip_sort)?;
                let cell = |v: Option<f64>| v.map_or("-".to_string(), ms);
                let ratio =
                    |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.0}x", v / profk_ms));
                println!(
                "| 2^{:.1} | {k} | {} | {} | {} | {} | {} | {} | {} | {} | {attempts} | {} | {} | {} | {}/{}/{} |",
                (n as f64).log2(),
                ms(profk_ms),
                cell(select_ms),
                cell(sort_ms),
                cell(plain),
                cell(read),
                ratio(select_ms),
                ratio(sort_ms),
                plain.map_or("-".to_string(), |p| format!("{:.2}", profk_ms / p)),
                warm.stats.sample,
                warm.stats.threshold_rank,
                warm.stats.capacity,
                ms(stage_ms(last.time_sample)),
                ms(stage_ms(last.time_filter)),
                ms(stage_ms(last.time_select)),
            );
            }
        }
    }
    Ok(())
}

/// Milliseconds: three decimals below 10 ms, one above.
fn ms(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.3}")
    } else {
        format!("{v:.1}")
    }
}

/// Median wall time of `reps` calls, in milliseconds.
fn median(reps: usize, mut f: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<f64> {
    let mut times: Vec<Duration> = Vec::with_capacity(reps);
    for _ in 0..reps {
        let started = Instant::now();
        f()?;
        times.push(started.elapsed());
    }
    times.sort_unstable();
    Ok(times[reps / 2].as_secs_f64() * 1e3)
}

fn normal_input(rows: usize, n: usize, dtype: DType) -> anyhow::Result<Tensor> {
    const CHUNK: usize = 1 << 16;
    let mut data = vec![0f32; rows * n];
    data.par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(c, chunk)| {
            let mut rng = ChaCha8Rng::seed_from_u64(c as u64);
            chunk
                .iter_mut()
                .for_each(|v| *v = rng.sample(rand_distr::StandardNormal));
        });
    Ok(Tensor::from_vec(data, (rows, n), &Device::Cpu)?.to_dtype(dtype)?)
}

/// The floor of one thread: a single pass comparing every element with a constant.
fn plain_pass(x: &Tensor) -> anyhow::Result<()> {
    std::hint::black_box(over_slice(x, |data| {
        data.iter().filter(|&&v| v >= 3.0).count()
    })?);
    Ok(())
}

/// The memory floor of the machine: the same pass split over every thread.
fn parallel_read(x: &Tensor) -> anyhow::Result<()> {
    let count = over_slice(x, |data| {
        data.par_chunks(1 << 18)
            .map(|c| c.iter().filter(|&&v| v >= 3.0).count())
            .sum::<usize>()
    })?;
    std::hint::black_box(count);
    Ok(())
}

/// Runs `f` on the f32 tensor's storage in place.
fn over_slice(x: &Tensor, f: impl Fn(&[f32]) -> usize) -> anyhow::Result<usize> {
    let (storage, layout) = x.storage_and_layout();
    let (candle_core::Storage::Cpu(cpu), Some((start, end))) =
        (&*storage, layout.contiguous_offsets())
    else {
        bail!("the passes need a contiguous CPU tensor");
    };
    match x.dtype() {
        DType::F32 => Ok(f(&cpu.as_slice::<f32>()?[start..end])),
        other => bail!("the plain pass is measured on f32 inputs, not {other:?}"),
    }
}
