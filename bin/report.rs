//! `sparsetrain-report`: one HTML page over run directories.
//!
//! ```text
//! sparsetrain-report runs/tiny-profk-20261130-013000 runs/tiny-sort-20261130-013500 --out report.html
//! ```

use anyhow::{Context, Result};
use clap::Parser;
use eval::RunDir;
use std::path::PathBuf;

/// Write one self-contained HTML page comparing runs: step and selection time per selector, the
/// speed-up of profk, every logged metric over steps, and tables of final numbers.
#[derive(Parser)]
#[command(
    name = "sparsetrain-report",
    version = sparsetrain::VERSION,
    about = "Compare training runs in one HTML page"
)]
struct Cli {
    /// Run directories (each holding metrics.jsonl, normally also run.json and config.json).
    #[arg(required = true, value_name = "RUN_DIR")]
    runs: Vec<PathBuf>,
    /// Output HTML file.
    #[arg(long, value_name = "FILE.html")]
    out: PathBuf,
}

fn main() -> Result<()> {
    let Cli { runs, out } = Cli::parse();
    let dirs = runs
        .iter()
        .map(|p| RunDir::open_existing(p))
        .collect::<eval::Result<Vec<_>>>()?;
    let data = eval::report::write_report(&dirs, &out)
        .with_context(|| format!("writing the report {}", out.display()))?;
    print!("{}", eval::report::summary_text(&data));
    println!("wrote {} ({} runs)", out.display(), dirs.len());
    Ok(())
}
