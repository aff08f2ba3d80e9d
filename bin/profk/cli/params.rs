//! `profk params`: print the sample size, threshold rank, buffer capacity and failure probabilities.

use anyhow::Context;
use profk::params::{self, Params};

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
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: ParamsArgs) -> anyhow::Result<()> {
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
fn parse_count(text: &str) -> Result<u64, String> {
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
