//! `extract CONFIG [--out DIR]`: write a model's residual-stream activations into safetensors shards.
//! Rerunning with the same config and output directory resumes a killed run.
use activations::shards::{extract, ExtractConfig, ExtractOptions};
use anyhow::Context;
use clap::Parser;
use std::path::PathBuf;

#[derive(Parser)]
#[command(about = "Extract GPT-2 residual-stream activations into safetensors shards")]
struct Args {
    /// TOML config (see configs/tiny-extract.toml).
    config: PathBuf,
    /// Output directory (overrides `out_dir`).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Device (overrides `device`): cpu, cuda, cuda:N.
    #[arg(long)]
    device: Option<String>,
    /// Stored tokens (overrides `corpus.max_tokens`).
    #[arg(long)]
    max_tokens: Option<usize>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let mut cfg = ExtractConfig::from_file(&args.config)?;
    if let Some(out) = args.out {
        cfg.out_dir = out;
    }
    if let Some(device) = args.device {
        cfg.device = device;
    }
    if args.max_tokens.is_some() {
        cfg.corpus.max_tokens = args.max_tokens;
    }
    let opts = ExtractOptions {
        progress: !args.quiet,
        ..Default::default()
    };
    let report = extract(&cfg, &opts)
        .with_context(|| format!("extracting with {}", args.config.display()))?;
    let m = &report.manifest;
    println!(
        "{} tokens x {} hook point(s) x d_model {} ({}) in {} shard(s) at {}",
        m.total_tokens,
        m.hook_points.len(),
        m.d_model,
        m.dtype,
        m.shards.len(),
        cfg.out_dir.display()
    );
    println!(
        "computed {} tokens in {:.2} s: {:.0} tokens/s ({} shard(s) written, {} reused)",
        report.tokens_computed,
        report.seconds,
        report.tokens_per_second(),
        report.shards_written,
        report.shards_reused
    );
    if !report.shards_remade.is_empty() {
        println!(
            "re-made {} shard(s) that failed their check: {}",
            report.shards_remade.len(),
            report.shards_remade.join(", ")
        );
    }
    Ok(())
}
