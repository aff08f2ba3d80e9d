//! `finetune CONFIG [--out DIR] [--resume]`: fine-tune GPT-2 with error-feedback top-k sparsified AdamW.
use anyhow::Context;
use clap::Parser;
use gradsparse::run::{finetune, RunOptions};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    version,
    about = "Fine-tune GPT-2 with error-feedback top-k gradient sparsification"
)]
struct Args {
    /// TOML config, e.g. configs/tiny-finetune.toml.
    config: PathBuf,
    /// Run directory (default: runs/<name>-<selector>-<timestamp>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Continue the run in --out from its latest checkpoint.
    #[arg(long, requires = "out")]
    resume: bool,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let stop = eval::StopSignal::ctrl_c().map_err(anyhow::Error::msg)?;
    let opts = RunOptions {
        out: args.out,
        resume: args.resume,
        runs_root: None,
        stop,
        progress_bar: true,
    };
    let result = finetune(&args.config, &opts)
        .with_context(|| format!("finetune {}", args.config.display()))?;
    let s = &result.summary;
    println!("run directory: {}", result.run_dir.display());
    println!(
        "steps: {}  tokens: {}  wall: {:.1} s  outcome: {:?}",
        s.progress.step, s.progress.tokens, s.progress.wall_s, s.outcome
    );
    if let Some(h) = result.unigram_entropy {
        println!(
            "unigram entropy of the training tokens: {h:.3} nats/token (context-free baseline)"
        );
    }
    if let Some(m) = &s.final_eval {
        for (k, v) in m {
            println!("final {k}: {v:.4}");
        }
    }
    if let Some(dir) = &result.installed_tiny {
        println!("installed as the default tiny model: {}", dir.display());
    }
    Ok(())
}
