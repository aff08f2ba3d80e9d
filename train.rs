//! `train-sae CONFIG [--set KEY=VALUE]... [--out DIR] [--resume]`: trains a sparse autoencoder as the
//! TOML config describes.
use clap::Parser;
use sparsetrain::RunArgs;

#[derive(Parser)]
#[command(
    name = "train-sae",
    version = sparsetrain::VERSION,
    about = "Train a BatchTopK / Matryoshka / crosscoder SAE from a TOML config"
)]
struct Args {
    #[command(flatten)]
    run: RunArgs,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    sparsetrain::record_build();
    if args.run.config_reference {
        print!("{}", sparsetrain::config_reference());
        return Ok(());
    }
    if let Some(code) = args.run.launch_ranks()? {
        sparsetrain::exit_with(code);
    }
    let opts = sae::run::RunOptions {
        config: args.run.config()?,
        overrides: args.run.set,
        out: args.run.out,
        resume: args.run.resume,
        stop: runtime::signal::StopSignal::install()?,
        build: sparsetrain::build_info(),
        group: None,
    };
    let summary = sae::run::train_sae(&opts)?;
    let dir = summary.run_dir.display();
    if summary.stopped {
        sparsetrain::exit_with(summary.exit_code);
    }
    if let Some(m) = &summary.final_eval {
        for (name, v) in m {
            println!("{name:>24} {v:.5}");
        }
    }
    if let Some(hint) = &summary.no_held_out {
        println!("warning: {hint}");
    }
    println!("run: {dir}  (SAE in SAELens layout: {dir}/sae, report: {dir}/report.html)");
    Ok(())
}
