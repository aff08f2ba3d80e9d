//! `profk`: parameters, file-based selection and benchmarks of the Prof-K selector.
mod cli;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "profk", version = sparsetrain::VERSION, about = "Exact top-k selection with Prof-K")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the sample size, threshold rank, buffer capacity and failure probabilities.
    Params(cli::params::ParamsArgs),
    /// Select the top k of a tensor stored in a safetensors file.
    Select(cli::select::SelectArgs),
    /// Time Prof-K against the baselines and print a table.
    Bench(cli::bench::BenchArgs),
    /// Count the failures of many first attempts against the plan's exact probabilities.
    Epsilon(cli::epsilon::EpsilonArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Params(args) => cli::params::run(args),
        Command::Select(args) => cli::select::run(args),
        Command::Bench(args) => cli::bench::run(args),
        Command::Epsilon(args) => cli::epsilon::run(args),
    };
    if let Err(err) = result {
        eprintln!("profk: {err:#}");
        std::process::exit(1);
    }
}
