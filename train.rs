//! `train-sae CONFIG [--out DIR] [--resume]`: trains a sparse autoencoder as the TOML config describes.
use clap::Parser;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "train-sae",
    about = "Train a BatchTopK / Matryoshka / crosscoder SAE from a TOML config"
)]
struct Args {
    /// The TOML config (e.g. configs/tiny.toml).
    config: PathBuf,
    /// Run directory (default: runs/<name>-<selector>-<timestamp>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Continue the run in --out from its latest checkpoint.
    #[arg(long, requires = "out")]
    resume: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let opts = sae::run::RunOptions {
        config: args.config,
        out: args.out,
        resume: args.resume,
    };
    let summary = sae::run::train_sae(&opts)?;
    let dir = summary.run_dir.display();
    if summary.stopped {
        println!(
            "stopped at step {}; continue with: train-sae {} --out {dir} --resume",
            summary.step,
            opts.config.display()
        );
        return Ok(());
    }
    if let Some(m) = &summary.final_eval {
        for (name, v) in m {
            println!("{name:>24} {v:.5}");
        }
    }
    println!("run: {dir}  (SAE in SAELens layout: {dir}/sae, report: {dir}/report.html)");
    Ok(())
}
