//! `profk epsilon`: first attempts of Prof-K on random and adversarial inputs, the observed failure
//! rates against the exact probabilities of the plan (see profk::epsilon).
use anyhow::{bail, Context};
use candle_core::Device;
use profk::epsilon::{self, Band, Config, Input, Trial};

use super::params::PlanDevice;

/// The device a build can run: a CPU build has no CUDA path to measure.
const DEFAULT_DEVICE: &str = if cfg!(feature = "cuda") {
    "cuda"
} else {
    "cpu"
};

#[derive(clap::Args)]
pub struct EpsilonArgs {
    /// Where the attempts run: the CUDA path, or the CPU path (use a small --attempts there).
    /// Default: cuda in a build with the `cuda` feature, cpu otherwise.
    #[arg(long, value_enum, default_value = DEFAULT_DEVICE)]
    device: PlanDevice,
    /// Elements per row.
    #[arg(long, default_value = "65536", value_parser = parse_usize)]
    n: usize,
    /// Elements selected per row.
    #[arg(long, default_value_t = 256)]
    k: usize,
    /// Rows per call; every row of a call is one first attempt.
    #[arg(long, default_value_t = 1024)]
    rows: usize,
    /// First attempts per (input, ε), at least.
    #[arg(long, default_value_t = 100_000)]
    attempts: u64,
    /// Failure budgets of one row, comma-separated; each gives the plan the device's rule chooses.
    #[arg(long, value_delimiter = ',', default_value = "0.3,0.1,0.03,0.01,0.001")]
    eps: Vec<f64>,
    /// Sample size S instead of the device's rule (t and M stay exact for it).
    #[arg(long)]
    sample: Option<u64>,
    /// Inputs, comma-separated (default: all): normal, constant, ties_at_threshold, sorted,
    /// reversed, few_distinct, infinities, duplicates.
    #[arg(long, value_delimiter = ',')]
    inputs: Vec<String>,
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
    /// One JSON object per trial instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: EpsilonArgs) -> anyhow::Result<()> {
    let device = match args.device {
        PlanDevice::Cpu => Device::Cpu,
        PlanDevice::Cuda if cfg!(feature = "cuda") => {
            Device::new_cuda(0).context("opening CUDA device 0")?
        }
        PlanDevice::Cuda => {
            bail!("--device cuda: this profk was built without CUDA; rebuild with --features cuda")
        }
    };
    let inputs = parse_inputs(&args.inputs)?;
    if !args.json {
        println!("| device | input | ε per row | S | t | M | attempts | predicted R<k | observed R<k | 3σ band | predicted R>M | observed R>M | 3σ band | within 3σ |");
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    }
    let (mut trials, mut outside) = (0, 0);
    for &eps in &args.eps {
        let config = Config {
            rows: args.rows.max(1),
            n: args.n,
            k: args.k,
            eps,
            sample: args.sample,
            attempts: args.attempts,
            seed: args.seed,
        };
        for &input in &inputs {
            let Some(trial) = epsilon::measure(&device, input, &config)? else {
                eprintln!(
                    "ε = {eps}: this path selects rows of {} without sampling",
                    args.n
                );
                break;
            };
            trials += 1;
            outside += usize::from(!trial.holds());
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string(&trial).context("serializing a trial")?
                );
            } else {
                print_row(&trial);
            }
        }
    }
    eprintln!("{trials} trials, {outside} with an observed count outside its 3σ band");
    Ok(())
}

fn print_row(t: &Trial) {
    let band = |b: Band| {
        (
            format!("{:.1}", b.predicted),
            b.observed,
            format!("[{:.1}, {:.1}]", b.low, b.high),
        )
    };
    let (pr, or, br) = band(t.recall());
    let (po, oo, bo) = band(t.overflow());
    let p = &t.params;
    println!(
        "| {} | {} | {:e} | {} | {} | {} | {} | {pr} | {or} | {br} | {po} | {oo} | {bo} | {} |",
        t.device,
        t.input.name(),
        p.eps,
        p.sample,
        p.t,
        p.capacity,
        t.attempts,
        if t.holds() { "yes" } else { "no" }
    );
}

fn parse_inputs(names: &[String]) -> anyhow::Result<Vec<Input>> {
    if names.is_empty() {
        return Ok(Input::ALL.to_vec());
    }
    names
        .iter()
        .map(|name| {
            Input::ALL
                .into_iter()
                .find(|i| i.name() == name.trim())
                .with_context(|| {
                    let known: Vec<&str> = Input::ALL.iter().map(|i| i.name()).collect();
                    format!("--inputs {name}: expected one of {}", known.join(", "))
                })
        })
        .collect()
}

/// A count, written plainly or as base^exponent.
fn parse_usize(text: &str) -> Result<usize, String> {
    let n = super::params::parse_count(text)?;
    usize::try_from(n).map_err(|_| format!("{text} does not fit in memory"))
}
