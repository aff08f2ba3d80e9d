//! `extract CONFIG [--set KEY=VALUE]... [--out DIR]`: write a model's residual-stream activations into
//! safetensors shards. Rerunning with the same config and output directory resumes a stopped or killed
//! run; SIGINT / SIGTERM stop it after the shard being written (exit status 128 + signal).
use activations::shards::{extract, ExtractConfig, ExtractOptions};
use anyhow::Context;
use clap::Parser;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "extract",
    version = sparsetrain::VERSION,
    about = "Extract GPT-2 residual-stream activations into safetensors shards"
)]
struct Args {
    /// TOML config (see configs/tiny-extract.toml and docs/config.md).
    #[arg(required_unless_present = "config_reference")]
    config: Option<PathBuf>,
    /// Override a config value, e.g. `--set data.max_tokens=65536` (repeatable), checked like the file.
    #[arg(long = "set", value_name = "SECTION.KEY=VALUE")]
    set: Vec<String>,
    /// Output directory (overrides `out_dir`).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Device (overrides `device`): cpu, cuda, cuda:N.
    #[arg(long)]
    device: Option<String>,
    /// Stored tokens (overrides `data.max_tokens`).
    #[arg(long)]
    max_tokens: Option<usize>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// Print the reference of every command's config keys (docs/config.md) and exit.
    #[arg(long, exclusive = true)]
    config_reference: bool,
}

fn main() -> anyhow::Result<()> {
    sparsetrain::init_tracing();
    let args = Args::parse();
    sparsetrain::record_build();
    if args.config_reference {
        print!("{}", sparsetrain::config_reference());
        return Ok(());
    }
    let config = args
        .config
        .ok_or_else(|| anyhow::anyhow!("a CONFIG file is needed (see configs/)"))?;
    let mut cfg = ExtractConfig::load(&config, &args.set)?;
    if let Some(out) = args.out {
        cfg.out_dir = out;
    }
    if let Some(device) = args.device {
        cfg.device = device.parse().map_err(anyhow::Error::msg)?;
    }
    if args.max_tokens.is_some() {
        cfg.data.max_tokens = args.max_tokens;
    }
    let stop = runtime::signal::StopSignal::install()?;
    let opts = ExtractOptions {
        progress: !args.quiet,
        stop: stop.clone(),
        ..Default::default()
    };
    let report =
        extract(&cfg, &opts).with_context(|| format!("extracting with {}", config.display()))?;
    if !report.complete && stop.is_requested() {
        eprintln!(
            "{}: stopped after {} new shard(s) in {}; rerun the same command to continue:\n{}",
            stop.describe(),
            report.shards_written,
            cfg.out_dir.display(),
            runtime::lock::command_line()
        );
        sparsetrain::exit_with(stop.exit_code());
    }
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
