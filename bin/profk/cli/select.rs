//! `profk select`: the top k of one tensor of a safetensors file, written to another safetensors
//! file.
use anyhow::{bail, Context};
use candle_core::{Device, Tensor};
use profk::{Mode, NanPolicy, Order, Selector, TopKOptions};
use runtime::config::DeviceSpec;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct SelectArgs {
    /// Safetensors file holding the input.
    #[arg(long)]
    pub input: PathBuf,
    /// Name of the tensor to select from.
    #[arg(long)]
    pub tensor: String,
    /// Elements to select per row (row-wise) or in all (flat).
    #[arg(long)]
    pub k: usize,
    /// rowwise: one selection per row of the last dimension; flat: one over every element.
    #[arg(long, value_enum, default_value = "rowwise")]
    pub mode: ModeArg,
    /// desc: values descending, ties by lowest index; index: ascending index.
    #[arg(long, value_enum, default_value = "desc")]
    pub order: OrderArg,
    /// error: a NaN in the input is an error; largest: NaN ranks above +inf.
    #[arg(long, value_enum, default_value = "error")]
    pub nan: NanArg,
    /// cpu, cuda or cuda:N (cuda needs a build with the cuda feature).
    #[arg(long, default_value = "cpu")]
    pub device: DeviceSpec,
    /// profk, sort, select or radix: all give the same answer.
    #[arg(long, value_enum, default_value = "profk")]
    pub selector: SelectorArg,
    /// Rank by magnitude; the values keep their sign.
    #[arg(long)]
    pub by_magnitude: bool,
    /// Safetensors file to write "values" (input dtype) and "indices" (i64) to.
    #[arg(long)]
    pub output: PathBuf,
    /// Print what the selector did (attempts, rows read once, reads of the rows, times) to stdout.
    #[arg(long)]
    pub stats: bool,
}

#[derive(clap::ValueEnum, Clone, Copy)]
pub enum ModeArg {
    Rowwise,
    Flat,
}

#[derive(clap::ValueEnum, Clone, Copy)]
pub enum OrderArg {
    Desc,
    Index,
}

#[derive(clap::ValueEnum, Clone, Copy)]
pub enum NanArg {
    Error,
    Largest,
}

#[derive(clap::ValueEnum, Clone, Copy)]
pub enum SelectorArg {
    Profk,
    Sort,
    Select,
    Radix,
}

pub fn run(args: SelectArgs) -> anyhow::Result<()> {
    // Before any work: an output that is the input (or a link to it) would destroy it.
    let output = harness::check_output_path(&args.output, &[&args.input])?;
    let device = runtime::device::open_device("--device", args.device)?;
    let x = load_tensor(&args.input, &args.tensor, &device)?;
    let opts = TopKOptions {
        selector: match args.selector {
            SelectorArg::Profk => Selector::Profk,
            SelectorArg::Sort => Selector::Sort,
            SelectorArg::Select => Selector::Select,
            SelectorArg::Radix => Selector::Radix,
        },
        mode: match args.mode {
            ModeArg::Rowwise => Mode::Rowwise,
            ModeArg::Flat => Mode::Flat,
        },
        order: match args.order {
            OrderArg::Desc => Order::Desc,
            OrderArg::Index => Order::Index,
        },
        nan: match args.nan {
            NanArg::Error => NanPolicy::Error,
            NanArg::Largest => NanPolicy::Largest,
        },
        by_magnitude: args.by_magnitude,
        ..TopKOptions::default()
    };
    let out = profk::topk(&x, args.k, &opts).with_context(|| {
        format!(
            "selecting the top {} of '{}' {:?}",
            args.k,
            args.tensor,
            x.dims()
        )
    })?;
    if args.stats {
        for line in stats_lines(&out.stats) {
            println!("{line}");
        }
    }
    let tensors = HashMap::from([
        ("values".to_string(), out.values.to_device(&Device::Cpu)?),
        ("indices".to_string(), out.indices.to_device(&Device::Cpu)?),
    ]);
    write_atomically(&tensors, &output)
}

/// What the selector did, one aspect per line: `name  value`.
fn stats_lines(s: &profk::SelectStats) -> Vec<String> {
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let mut lines = vec![
        (
            "selections",
            format!("{} (exact without sampling: {})", s.rows, s.exact_rows),
        ),
        (
            "attempts",
            format!(
                "{} in all, at most {} in one selection",
                s.total_attempts, s.attempts
            ),
        ),
    ];
    if s.sample > 0 {
        lines.push((
            "plan per row",
            format!(
                "sample S = {}, threshold rank t = {}, buffer M = {}",
                s.sample, s.threshold_rank, s.capacity
            ),
        ));
        lines.push((
            "retained R",
            format!("{} (final attempts, summed over rows)", s.retained),
        ));
    }
    lines.push((
        "misses",
        format!(
            "R < k: {}, R > M: {}, fell back to exact: {} row(s)",
            s.recall_failures, s.overflows, s.fallbacks
        ),
    ));
    if s.row_reads > 0 {
        lines.push((
            "histogram reads",
            format!(
                "{} in all, at most {} of one row; {} row(s) read once",
                s.row_reads, s.row_reads_most, s.read_once
            ),
        ));
    }
    lines.push((
        "time",
        format!(
            "{:.3} ms (sample {:.3} ms, filter {:.3} ms, select {:.3} ms)",
            ms(s.time_total),
            ms(s.time_sample),
            ms(s.time_filter),
            ms(s.time_select)
        ),
    ));
    lines
        .into_iter()
        .map(|(name, value)| format!("{name:<16} {value}"))
        .collect()
}

fn load_tensor(path: &Path, name: &str, device: &Device) -> anyhow::Result<Tensor> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let file = candle_core::safetensors::SliceSafetensors::new(&bytes)
        .with_context(|| format!("{} is not a valid safetensors file", path.display()))?;
    if file.get(name).is_err() {
        let mut names: Vec<String> = file.tensors().into_iter().map(|(n, _)| n).collect();
        names.sort();
        bail!(
            "{} holds no tensor '{name}' (it holds {names:?})",
            path.display()
        );
    }
    file.load(name, device)
        .with_context(|| format!("loading '{name}' from {}", path.display()))
}

/// Writes through `runtime::fs`: a reader never sees a partial file, and a failure leaves nothing
/// behind.
fn write_atomically(tensors: &HashMap<String, Tensor>, path: &Path) -> anyhow::Result<()> {
    if path.file_name().is_none() {
        bail!("--output {} names no file", path.display());
    }
    runtime::fs::write_atomic_via(path, |tmp| candle_core::safetensors::save(tensors, tmp))?;
    Ok(())
}
