//! `features`: feature dashboards for a trained SAE (docs/features.md), written to
//! `RUN_DIR/features.json` and shown in the run's report.html, optionally also in the layout Neuronpedia
//! imports.
//!
//! ```text
//! features runs/tiny-profk-20261130-013000 --latents 3,17 --neuronpedia np/
//! ```

use anyhow::{Context, Result};
use clap::Parser;
use sae::features::{build_for_run, FeatureOptions};
use std::path::PathBuf;

/// Build the feature dashboards of a run's SAE: densities of all latents, and for a sample across the
/// density range plus any latent named with --latents its top-activating and interval-sampled held-out
/// contexts, activation histogram and promoted / suppressed output tokens. The model and corpus are the
/// run's (config.json).
#[derive(Parser)]
#[command(
    name = "features",
    version = sparsetrain::VERSION,
    about = "Feature dashboards (RUN_DIR/features.json) for a trained SAE"
)]
struct Cli {
    /// The run directory (config.json, sae/, report.html).
    run_dir: PathBuf,
    /// The SAE in SAELens' layout: a checkpoint folder (RUN_DIR/checkpoints/step-N) or an SAE folder
    /// (default: the run's exported SAE in RUN_DIR/sae/).
    #[arg(long, value_name = "DIR")]
    sae: Option<PathBuf>,
    /// Latents whose dashboards are built in addition to the sample, e.g. `--latents 3,17,120`.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    latents: Vec<usize>,
    /// Latents sampled across the density range.
    #[arg(long, value_name = "N", default_value_t = FeatureOptions::default().latents)]
    sample: usize,
    /// Top-activating contexts per latent.
    #[arg(long, value_name = "N", default_value_t = FeatureOptions::default().examples)]
    examples: usize,
    /// Held-out tokens encoded at most.
    #[arg(long, value_name = "N", default_value_t = FeatureOptions::default().max_tokens)]
    tokens: usize,
    /// Also write the dashboards as Neuronpedia imports them (SAEDashboard's batch-N.json files) under
    /// this folder.
    #[arg(long, value_name = "OUT_DIR")]
    neuronpedia: Option<PathBuf>,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    device: String,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let device = runtime::device::parse_device(&cli.device)?;
    let opts = FeatureOptions {
        latents: cli.sample,
        examples: cli.examples,
        max_tokens: cli.tokens,
        requested: cli.latents.clone(),
        ..FeatureOptions::default()
    };
    let f = build_for_run(&cli.run_dir, cli.sae.as_deref(), &opts, &device)
        .with_context(|| format!("feature dashboards for {}", cli.run_dir.display()))?;
    println!(
        "{} latents ({} dead) over {} held-out tokens; {} dashboards",
        f.n_latents,
        f.histogram.dead,
        f.n_tokens,
        f.latents.len()
    );
    if let Some(why) = &f.output_tokens_missing {
        println!("no promoted / suppressed tokens: {why}");
    }
    println!(
        "wrote {} and {}",
        cli.run_dir
            .join(eval::report::features::FEATURES_FILE)
            .display(),
        cli.run_dir.join("report.html").display()
    );
    if let Some(out) = &cli.neuronpedia {
        let sae_dir = cli
            .sae
            .clone()
            .unwrap_or_else(|| cli.run_dir.join(sae::hub::EXPORT_DIR));
        let source = sae::hub::find_sae(&sae_dir)
            .and_then(|dir| sae::neuronpedia::Source::from_sae_dir(&dir))
            .with_context(|| format!("the SAE's cfg.json in {}", sae_dir.display()))?;
        let dir = sae::neuronpedia::export(&f, &source, out)
            .with_context(|| format!("writing the Neuronpedia export under {}", out.display()))?;
        println!("wrote the Neuronpedia export {}", dir.display());
    }
    Ok(())
}
