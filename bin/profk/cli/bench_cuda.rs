//! `profk bench --device cuda`: the CUDA check and timing table (see profk::cuda::bench).
use anyhow::bail;

/// Options of the CUDA benchmark.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct CudaBenchArgs {
    /// Compare every CUDA selector with the CPU path first, and stop on a mismatch.
    #[arg(long)]
    pub check: bool,
    /// One k per size instead of the full grid.
    #[arg(long)]
    pub quick: bool,
    /// Check one row of 2^32 + 4097 elements against the CPU path (~40 GB of device memory).
    #[arg(long)]
    pub big: bool,
    /// Time Prof-K with stages left out instead of the grid.
    #[arg(long)]
    pub stages: bool,
    /// Time only the target rows (2^30, and the flat 4096x2^16 and 8192x2^17 selections of the
    /// SAE), in both output orders.
    #[arg(long)]
    pub targets: bool,
    /// Time only Prof-K on the shapes of the peer comparison (bench/peers/topk_peers.sh).
    #[arg(long)]
    pub peers: bool,
    /// Time only the row-wise shapes (1024x2^18, 128x2^20, masked 8192x32768, then few rows of 2^20
    /// to 2^24), in both output orders, by the default path, the histogram selection and the
    /// sampled path.
    #[arg(long)]
    pub row_shapes: bool,
    /// Only the shapes whose label contains this text (e.g. "masked"), of the grid, --row-shapes,
    /// --peers or --targets.
    #[arg(long)]
    pub only: Option<String>,
    /// Only the checks, no timing table.
    #[arg(long)]
    pub no_table: bool,
    /// Element type of the inputs: f32, f16 or bf16.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
}

#[cfg(all(feature = "cuda", feature = "bench"))]
pub fn run(args: &CudaBenchArgs) -> anyhow::Result<()> {
    let vars = std::env::vars().filter(|(name, _)| name.starts_with("PROFK_"));
    let tuning = tuning_from(vars)?;
    profk::tuning::scoped(tuning, || run_tuned(args))
}

/// The benchmark's tuning from the `PROFK_*` variables (each named on its `profk::Tuning` field):
/// the one place the benchmark switches are read.
#[cfg(all(feature = "cuda", feature = "bench"))]
fn tuning_from(vars: impl Iterator<Item = (String, String)>) -> anyhow::Result<profk::Tuning> {
    use profk::tuning::{FilterChunk, HistogramOutput};
    let mut t = profk::Tuning::default();
    for (name, value) in vars {
        let number = || -> anyhow::Result<u64> {
            value
                .parse()
                .map_err(|_| anyhow::anyhow!("{name}={value}: expected a number"))
        };
        let choice = |options: &[&str]| -> anyhow::Result<usize> {
            options
                .iter()
                .position(|o| *o == value)
                .ok_or_else(|| anyhow::anyhow!("{name}={value}: expected one of {options:?}"))
        };
        match name.as_str() {
            "PROFK_GPU_SAMPLE" => t.sample_rows = Some(number()?),
            "PROFK_GPU_SAMPLE_ONE" => t.sample_one_row = Some(number()?),
            "PROFK_WHOLE_LIST_EPS_DIV" => t.whole_list_eps_div = Some(number()?),
            "PROFK_ATTEMPTS" => t.attempts = Some(number()?.clamp(1, 2) as u32),
            "PROFK_FILTER_CHUNK" => {
                t.filter_chunk = match value.as_str() {
                    "one" => FilterChunk::OnePerBlock,
                    _ => FilterChunk::Elements(number()?),
                }
            }
            "PROFK_PREFETCH_MB" => t.prefetch_mib = Some(number()?),
            "PROFK_FILTER_BINS" => t.no_filter_bins = choice(&["1", "0"])? == 1,
            "PROFK_SPREAD_PER" => t.spread_per = Some(number()?),
            "PROFK_SAMPLE" => t.no_spread_sample = choice(&["spread", "block"])? == 1,
            "PROFK_RANK_LIST" => t.no_rank_list = choice(&["1", "0"])? == 1,
            "PROFK_RANK_WHOLE" => t.rank_whole = Some(choice(&["0", "1"])? == 1),
            "PROFK_OUTPUT" => t.output_ranking = Some(choice(&["sort", "rank"])? == 1),
            "PROFK_RANK_SLICE" => t.rank_slice = Some([64, 128][choice(&["64", "128"])?]),
            "PROFK_RANK_THREADS" => t.rank_threads_512 = choice(&["1024", "512"])? == 1,
            "PROFK_VALUE_SORT" => t.value_sort_whole = choice(&["key", "whole"])? == 1,
            "PROFK_SORT_TILE" => t.sort_tile = Some([2048, 1024][choice(&["2048", "1024"])?]),
            "PROFK_FALLBACK_PER_SM" => t.fallback_blocks_per_sm = Some(number()?),
            "PROFK_ROWS_PER_SM" => t.histogram_blocks_per_sm = Some(number()?),
            "PROFK_ROWS_OUTPUT" => {
                t.histogram_output = [
                    HistogramOutput::Full,
                    HistogramOutput::Unsorted,
                    HistogramOutput::None,
                ][choice(&["sorted", "unsorted", "none"])?]
            }
            "PROFK_ROWS_DEAL" => t.histogram_static_rows = choice(&["1", "0"])? == 1,
            "PROFK_POOL_RELEASE" => t.pool_release = choice(&["0", "1"])? == 1,
            "PROFK_NO_DEPENDENT_LAUNCH" => t.no_dependent_launch = choice(&["0", "1"])? == 1,
            // Read by bench/lib.sh, not by the selector.
            "PROFK_CHECKED" => {}
            _ => anyhow::bail!("{name}: not a Prof-K benchmark switch (see profk::Tuning)"),
        }
    }
    Ok(t)
}

#[cfg(all(feature = "cuda", feature = "bench"))]
fn run_tuned(args: &CudaBenchArgs) -> anyhow::Result<()> {
    use anyhow::Context;
    use candle_core::{DType, Device};
    let dev = Device::new_cuda(0).context("opening CUDA device 0")?;
    if args.check {
        let fails = profk::cuda::bench::check(&dev)?;
        if !fails.is_empty() {
            for f in &fails {
                eprintln!("MISMATCH {f}");
            }
            bail!("{} CUDA check(s) differ from the CPU path", fails.len());
        }
        println!("check: every CUDA selector equals the CPU path");
    }
    if args.big {
        let fails = profk::cuda::bench::check_big(&dev)?;
        if !fails.is_empty() {
            bail!("CUDA differs from the CPU path on {}", fails.join(", "));
        }
        println!("check: n = 2^32 + 4097 equals the CPU path");
    }
    let dtype = match args.dtype.as_str() {
        "f32" => DType::F32,
        "f16" => DType::F16,
        "bf16" => DType::BF16,
        other => bail!("--dtype {other}: expected f32, f16 or bf16"),
    };
    if args.no_table {
        return Ok(());
    }
    let mut table = String::new();
    if args.stages {
        profk::cuda::bench::run_stages(&dev, &mut table)?;
    } else if args.peers {
        profk::cuda::bench::run_peers(&dev, dtype, args.only.as_deref(), &mut table)?;
    } else if args.row_shapes {
        profk::cuda::bench::run_rows(&dev, dtype, args.only.as_deref(), &mut table)?;
    } else if args.targets {
        profk::cuda::bench::run_targets(&dev, args.only.as_deref(), &mut table)?;
    } else {
        profk::cuda::bench::run_grid(&dev, args.quick, dtype, args.only.as_deref(), &mut table)?;
    }
    println!("{table}");
    Ok(())
}

#[cfg(not(all(feature = "cuda", feature = "bench")))]
pub fn run(_args: &CudaBenchArgs) -> anyhow::Result<()> {
    bail!(
        "this profk was built without its CUDA benchmarks: rebuild with --features cuda,bench \
         (tools/cuda-toolchain.sh)"
    )
}
