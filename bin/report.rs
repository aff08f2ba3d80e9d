//! `sparsetrain-report`: one HTML page over run directories.
//!
//! ```text
//! sparsetrain-report runs/tiny-profk-20261130-013000 runs/tiny-sort-20261130-013500 --out report.html
//! sparsetrain-report --pair runs/a-profk-1 runs/b-sort-2 --out forced.html
//! ```

use anyhow::{Context, Result};
use clap::Parser;
use harness::RunDir;
use std::path::{Path, PathBuf};

/// Write one self-contained HTML page comparing runs: step and selection time, the speed-up of profk
/// over runs whose configs differ only in the selector, the speed-up a run measured in its own checks,
/// a fine-tune against its dense baseline, every logged metric over steps, and tables of final
/// numbers. Runs whose host, GPU, driver, commit, features or model differ are warned of.
#[derive(Parser)]
#[command(
    name = "sparsetrain-report",
    version = sparsetrain::VERSION,
    about = "Compare training runs in one HTML page"
)]
struct Cli {
    /// Run directories (each holding metrics.jsonl, normally also run.json and config.json).
    #[arg(required_unless_present = "pair", value_name = "RUN_DIR")]
    runs: Vec<PathBuf>,
    /// Compare RUN_A (profk, or the sparsified fine-tune) with RUN_B though their configs differ in
    /// more than the selector (repeatable); the page lists every key they differ in. Runs named here
    /// need not be repeated in RUN_DIR.
    #[arg(long, num_args = 2, value_names = ["RUN_A", "RUN_B"], action = clap::ArgAction::Append)]
    pair: Vec<PathBuf>,
    /// Output HTML file.
    #[arg(long, value_name = "FILE.html")]
    out: PathBuf,
}

fn main() -> Result<()> {
    let Cli {
        mut runs,
        pair,
        out,
    } = Cli::parse();
    let mut forced = Vec::new();
    for two in pair.chunks(2) {
        let mut index_of = |path: &Path| -> usize {
            let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
                (Ok(x), Ok(y)) => x == y,
                _ => a == b,
            };
            match runs.iter().position(|r| same(r, path)) {
                Some(i) => i,
                None => {
                    runs.push(path.to_path_buf());
                    runs.len() - 1
                }
            }
        };
        let (a, b) = (index_of(&two[0]), index_of(&two[1]));
        if a == b {
            anyhow::bail!(
                "--pair {} {}: a run cannot be paired with itself",
                two[0].display(),
                two[1].display()
            );
        }
        forced.push((a, b));
    }
    let dirs = runs
        .iter()
        .map(|p| RunDir::open_existing(p))
        .collect::<harness::Result<Vec<_>>>()?;
    let data = eval::report::write_report_paired(&dirs, &forced, &out)
        .with_context(|| format!("writing the report {}", out.display()))?;
    print!("{}", eval::report::summary_text(&data, &forced));
    println!("wrote {} ({} runs)", out.display(), dirs.len());
    Ok(())
}
