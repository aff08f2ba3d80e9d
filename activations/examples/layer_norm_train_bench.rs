//! Forward + backward of the training layer norm: `layer_norm_train` against the composed candle
//! ops the training path used before (`candle_nn::ops::layer_norm_slow`), for
//! docs/perf/activations-train.md.
//!
//!     cargo run --release -p activations --features bench --example layer_norm_train_bench -- --device cpu
//!     cargo run --release -p activations --features cuda,bench --example layer_norm_train_bench -- --device cuda
//!
//! CUDA: 2048 rows (batch 4 x 512) at GPT-2 Medium and XL widths; CPU: the tiny model's width at
//! its training batch (2 x 256 rows). "fwd" is the op on variables (the CUDA path also saves the
//! row statistics); "fwd+bwd" adds `y.backward()` (seed gradient all ones), which includes candle's
//! gradient bookkeeping (the seed, a zero buffer and an add per input); the row "candle's backward
//! bookkeeping" times the same for `affine(x, 1, 0)`, whose own backward is one pass. Medians of
//! 10 rounds of `--iters / 10` calls back to back. Prints a markdown table with the memory floor of each direction.
use candle_core::{DType, Device, Tensor, Var};
use clap::Parser;
use gpt2::ops::layer_norm_train;

mod common;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Rows; default 2048 on CUDA, 512 on the CPU.
    #[arg(long)]
    rows: Option<usize>,
    /// Widths; default 1024,1600 on CUDA, 128 on the CPU.
    #[arg(long, value_delimiter = ',')]
    widths: Vec<usize>,
    /// f32, bf16 (CUDA) or f16.
    #[arg(long, default_value = "f32")]
    dtype: String,
    #[arg(long, default_value_t = 200)]
    iters: usize,
    /// Memory bandwidth for the floor: H200 read+write about 4.3 TB/s.
    #[arg(long, default_value_t = 4.3)]
    tb_per_s: f64,
}

/// Seconds per call of `f`: the median over 10 rounds, each of `iters / 10` calls back to back
/// with one synchronization at the end (the device's throughput, as in a training step;
/// synchronizing every call would add the launch latency and let candle's CUDA memory pool trim
/// itself each time), after two warm-ups.
fn time(dev: &Device, iters: usize, f: impl Fn() -> anyhow::Result<()>) -> anyhow::Result<f64> {
    for _ in 0..2 {
        f()?;
    }
    let per_round = (iters / 10).max(1);
    let round = common::median_secs(dev, 0, 10, || (0..per_round).try_for_each(|_| f()))?;
    Ok(round / per_round as f64)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let dev = common::device(&args.device)?;
    let dtype = match args.dtype.as_str() {
        "f32" => DType::F32,
        "bf16" => DType::BF16,
        "f16" => DType::F16,
        other => anyhow::bail!("--dtype: f32, bf16 or f16, got {other}"),
    };
    let rows = args.rows.unwrap_or(if dev.is_cuda() { 2048 } else { 512 });
    let widths = match (args.widths.is_empty(), dev.is_cuda()) {
        (false, _) => args.widths.clone(),
        (true, true) => vec![1024, 1600],
        (true, false) => vec![128],
    };
    let eps = 1e-5;
    println!("| device | rows x d | dtype | op | fwd ms | fwd+bwd ms | floor fwd / bwd ms |");
    println!("|---|---|---|---|---|---|---|");
    for d in widths {
        let var = |t: Tensor| -> anyhow::Result<Var> { Ok(Var::from_tensor(&t.to_dtype(dtype)?)?) };
        let x = var(Tensor::randn(0f32, 1.0, (rows, d), &dev)?)?;
        let w = var((Tensor::randn(0f32, 0.2, d, &dev)? + 1.0)?)?;
        let b = var(Tensor::randn(0f32, 0.2, d, &dev)?)?;
        let (x, w, b) = (x.as_tensor(), w.as_tensor(), b.as_tensor());
        // Bytes: fwd reads x, writes y; bwd reads x and dy, writes dx (weights and row stats are
        // small beside them).
        let elem = rows * d * dtype.size_in_bytes();
        let floor = |passes: usize| (passes * elem) as f64 / (args.tb_per_s * 1e12) * 1e3;
        type Ln = fn(&Tensor, &Tensor, &Tensor, f32) -> candle_core::Result<Tensor>;
        let ops: [(&str, Ln); 3] = [
            ("layer_norm_train", layer_norm_train),
            (
                "composed (layer_norm_slow)",
                candle_nn::ops::layer_norm_slow,
            ),
            ("candle's backward bookkeeping", |x, _, _, _| {
                x.affine(1.0, 0.0)
            }),
        ];
        for (name, op) in ops {
            let fwd = time(&dev, args.iters, || {
                op(x, w, b, eps)?;
                Ok(())
            })?;
            let both = time(&dev, args.iters, || {
                op(x, w, b, eps)?.backward()?;
                Ok(())
            })?;
            println!(
                "| {} | {rows} x {d} | {dtype:?} | {name} | {:.4} | {:.4} | {:.4} / {:.4} |",
                if dev.is_cuda() { "cuda" } else { "cpu" },
                fwd * 1e3,
                both * 1e3,
                floor(2),
                floor(3),
            );
        }
    }
    Ok(())
}
