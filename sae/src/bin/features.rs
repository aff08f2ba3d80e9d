//! `features RUN_DIR [--sae DIR]`: feature dashboards for a trained SAE: its top-activating held-out
//! contexts and densities, written to `RUN_DIR/features.json` (docs/features.md) and shown in the run's
//! report.html. The model and corpus are the run's (config.json); the SAE is `RUN_DIR/sae/` or a
//! checkpoint folder.
use anyhow::Context;
use clap::Parser;
use sae::features::{build_for_run, FeatureOptions};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "features",
    version,
    about = "Feature dashboards (RUN_DIR/features.json) for a trained SAE"
)]
struct Args {
    /// The run directory (config.json, sae/, report.html).
    run_dir: PathBuf,
    /// The SAE in SAELens' layout: a checkpoint folder (RUN_DIR/checkpoints/step-N) or a saved SAE.
    #[arg(long, value_name = "DIR")]
    sae: Option<PathBuf>,
    /// Latents sampled across the density range.
    #[arg(long, default_value_t = FeatureOptions::default().latents)]
    latents: usize,
    /// Top-activating contexts per latent.
    #[arg(long, default_value_t = FeatureOptions::default().examples)]
    examples: usize,
    /// Held-out tokens encoded at most.
    #[arg(long, default_value_t = FeatureOptions::default().max_tokens)]
    tokens: usize,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    device: String,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let device = activations::models::parse_device(&args.device)?;
    let opts = FeatureOptions {
        latents: args.latents,
        examples: args.examples,
        max_tokens: args.tokens,
        ..FeatureOptions::default()
    };
    let f = build_for_run(&args.run_dir, args.sae.as_deref(), &opts, &device)
        .with_context(|| format!("feature dashboards for {}", args.run_dir.display()))?;
    println!(
        "{} latents ({} dead) over {} held-out tokens; {} sampled",
        f.n_latents,
        f.histogram.dead,
        f.n_tokens,
        f.latents.len()
    );
    println!(
        "wrote {} and {}",
        args.run_dir
            .join(eval::report::features::FEATURES_FILE)
            .display(),
        args.run_dir.join("report.html").display()
    );
    Ok(())
}
