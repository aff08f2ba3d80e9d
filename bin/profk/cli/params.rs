//! `profk params`: print the sample size, threshold rank, buffer capacity and failure
//! probabilities.

use anyhow::Context;
use profk::params::{self, Params};
use profk::sharded::{self, WireBudget};
use profk::{Mode, TopKOptions};

#[derive(clap::Args)]
pub struct ParamsArgs {
    /// Elements per selection (an integer or a power such as 2^33).
    #[arg(long, value_parser = parse_count)]
    n: u64,
    /// Elements to select (an integer or a power such as 2^10).
    #[arg(long, value_parser = parse_count)]
    k: u64,
    /// Failure budget ε: Pr(R < k) ≤ ε/2 and Pr(R > M) ≤ ε/2.
    #[arg(long, default_value_t = 1e-3)]
    eps: f64,
    /// Sample size S (default: the rule of Proposition 7).
    #[arg(long, value_parser = parse_count)]
    sample: Option<u64>,
    /// Exact optimal t and M of Theorem 4 (the default).
    #[arg(long, conflicts_with = "fast")]
    exact: bool,
    /// Closed-form t and M of Algorithm 1.
    #[arg(long)]
    fast: bool,
    /// The plan a device's selection path takes for a call of --rows rows of n (row-wise: ε is the
    /// call's budget, split over the rows), instead of Theorem 4 with the default sample size.
    #[arg(long, value_enum, conflicts_with_all = ["sample", "exact", "fast"])]
    device: Option<PlanDevice>,
    /// Rows of the call, with --device.
    #[arg(long, default_value_t = 1, value_parser = parse_count, requires = "device")]
    rows: u64,
    /// SMs of the GPU, with --device cuda (the H200 has 132): whether the rows fill the device
    /// decides between the histogram selection and sampling.
    #[arg(long, default_value_t = 132, requires = "device")]
    sms: u32,
    /// The sharded selection's plan over this many ranks (one pooled sample of all n, Theorem 4 at
    /// the default sample size), with the bytes each call puts on the wire for f32 scores.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), conflicts_with_all = ["sample", "fast", "device"])]
    ranks: Option<u64>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum PlanDevice {
    Cpu,
    Cuda,
}

impl PlanDevice {
    pub fn name(self) -> &'static str {
        match self {
            PlanDevice::Cpu => "cpu",
            PlanDevice::Cuda => "cuda",
        }
    }
}

pub fn run(args: ParamsArgs) -> anyhow::Result<()> {
    if let Some(device) = args.device {
        return run_device(&args, device);
    }
    if let Some(ranks) = args.ranks {
        return run_sharded(&args, ranks);
    }
    let params = if args.fast {
        params::fast(args.n, args.k, args.eps, args.sample)?
    } else {
        params::exact(args.n, args.k, args.eps, args.sample)?
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&params).context("serializing the parameters")?
        );
    } else {
        print_table(
            &params,
            if args.fast {
                "fast (Algorithm 1)"
            } else {
                "exact (Theorem 4)"
            },
        );
    }
    Ok(())
}

/// The plan of `device`'s path, computed by the function that plans its calls.
fn run_device(args: &ParamsArgs, device: PlanDevice) -> anyhow::Result<()> {
    let rows = usize::try_from(args.rows.max(1)).context("--rows does not fit in memory")?;
    let n = usize::try_from(args.n).context("--n does not fit in memory")?;
    let k = usize::try_from(args.k).context("--k does not fit in memory")?;
    anyhow::ensure!(k <= n, "--k {k} exceeds the --n {n} elements of a row");
    let call = TopKOptions {
        mode: Mode::Rowwise,
        eps: args.eps,
        ..TopKOptions::default()
    };
    let row_eps = call.row_budget(rows);
    // f32 elements: the split layout's limit depends on the element type as well as the shape.
    let histogram = match device {
        PlanDevice::Cpu => None,
        PlanDevice::Cuda => profk::gpu_histogram_path(args.rows, args.n, args.k, 4, args.sms),
    };
    let plan = match (device, histogram) {
        (_, Some(_)) => None,
        (PlanDevice::Cpu, None) => profk::cpu_params_for(n, k, row_eps)?,
        (PlanDevice::Cuda, None) => profk::gpu_params_for(n, k, row_eps, rows)?,
    };
    if args.json {
        // The call, the budget of one row and the plan (null: exact selection without sampling,
        // by the histogram selection when "histogram" names its layout).
        let shown = serde_json::json!({
            "device": device.name(), "rows": rows, "row_eps": row_eps, "plan": plan,
            "histogram": histogram.map(|h| h.name()),
        });
        println!("{shown}");
        return Ok(());
    }
    let path = match device {
        PlanDevice::Cpu => "cpu (the plan of the CPU path)",
        PlanDevice::Cuda => "cuda (the plan of the CUDA path)",
    };
    println!("device         {path}");
    println!("rows           {rows}");
    println!("eps per row    {row_eps:e}");
    match (plan, histogram) {
        (_, Some(h)) => {
            println!("n              {n}");
            println!("k              {k}");
            println!(
                "plan           histogram selection, {} (f32 on {} SMs): exact, no sample, no redraw",
                h.name(),
                args.sms
            );
        }
        // A row that fails on this path costs more than on others, so its plan takes part of the
        // budget.
        (Some(p), None) if p.eps < row_eps => print_table(
            &p,
            "exact (Theorem 4) for the sample size of this path, on part of the budget: a row that \
             fails every attempt is ranked from its input inside the output launch",
        ),
        (Some(p), None) => print_table(&p, "exact (Theorem 4) for the sample size of this path"),
        (None, None) => {
            println!("n              {n}");
            println!("k              {k}");
            println!(
                "plan           exact selection without sampling (short rows or k close to n)"
            );
        }
    }
    Ok(())
}

/// Bytes of one f32 score on the wire.
const F32_BYTES: u64 = 4;

/// The sharded plan over `ranks` ranks and its bytes on the wire per call.
fn run_sharded(args: &ParamsArgs, ranks: u64) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.k <= args.n,
        "--k {} exceeds the --n {} elements",
        args.k,
        args.n
    );
    let plan = sharded::params_for(args.n, args.k, args.eps)?;
    let wire = plan.map(|p| WireBudget::new(&p, ranks, F32_BYTES));
    if args.json {
        let shown = serde_json::json!({ "ranks": ranks, "plan": plan, "wire_f32": wire });
        println!("{shown}");
        return Ok(());
    }
    let (Some(p), Some(w)) = (plan, wire) else {
        println!("ranks          {ranks}");
        println!("n              {}", args.n);
        println!("k              {}", args.k);
        println!(
            "plan           no sampling (k = 0 or k close to n): each rank sends its exact local \
             top-k, at most {} candidates of {} B",
            args.k.saturating_mul(ranks).min(args.n),
            sharded::candidate_bytes(F32_BYTES as usize)
        );
        return Ok(());
    };
    print_table(&p, "exact (Theorem 4), sharded: one pooled sample of all n");
    let fail = p.p_recall_fail + p.p_overflow;
    println!("ranks          {ranks}");
    println!(
        "               the ranks draw the same S global indices (the single-device draw for the \
         seed),\n               so the gathered sample is one uniform sample of all n: R, Pr(R < k), \
         Pr(R > M)\n               and the redraw rule are those of one rank, whatever the sharding"
    );
    println!(
        "wire per attempt, f32 scores (an index and a value per candidate: {} B):",
        sharded::candidate_bytes(4)
    );
    println!(
        "  sample       {} B gathered ({} values + a {}-byte block description per rank)",
        w.sample_gathered,
        p.sample,
        w.sample_gathered - p.sample * F32_BYTES
    );
    println!(
        "  counts       {} B all-reduced per rank (R and the NaN count)",
        w.counts
    );
    println!(
        "  candidates   {} B gathered at the expected R, {} B at most (R = M)",
        w.candidates_expected, w.candidates_max
    );
    println!(
        "  per call     {} B gathered on every rank; {} B sent per rank on average",
        w.gathered_expected, w.sent_per_rank
    );
    println!("  expected attempts {:.6}", 1.0 / (1.0 - fail));
    Ok(())
}

fn print_table(p: &Params, method: &str) {
    println!("method         {method}");
    println!("n              {}", p.n);
    println!("k              {}", p.k);
    println!("eps            {:e}", p.eps);
    let note = if p.is_full_selection() {
        "  (whole input: exact selection)"
    } else {
        ""
    };
    println!("sample S       {}{note}", p.sample);
    println!("threshold t    {}", p.t);
    println!("capacity M     {}", p.capacity);
    println!("Pr(R < k)      {:.6e}", p.p_recall_fail);
    println!("Pr(R > M)      {:.6e}", p.p_overflow);
    println!("Pr(failure)    {:.6e}", p.p_recall_fail + p.p_overflow);
}

/// A non-negative integer, written plainly or as base^exponent.
pub fn parse_count(text: &str) -> Result<u64, String> {
    let parsed = match text.split_once('^') {
        Some((base, exponent)) => {
            let base: u64 = base
                .trim()
                .parse()
                .map_err(|e| format!("base {base:?}: {e}"))?;
            let exponent: u32 = exponent
                .trim()
                .parse()
                .map_err(|e| format!("exponent {exponent:?}: {e}"))?;
            base.checked_pow(exponent)
                .ok_or_else(|| format!("{text} does not fit in 64 bits"))?
        }
        None => text.trim().parse().map_err(|e| format!("{text:?}: {e}"))?,
    };
    Ok(parsed)
}
