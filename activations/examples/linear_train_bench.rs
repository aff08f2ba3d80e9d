//! Forward + backward of GPT-2's linear layers: `linear_train` against the composed candle ops the
//! training path used before (matmul, bias add, `gelu`), for docs/perf/activations-train.md.
//!
//!     cargo run --release -p activations --features bench --example linear_train_bench -- --device cpu
//!     cargo run --release -p activations --features cuda,bench --example linear_train_bench -- --device cuda
//!
//! CUDA: n = 2048 tokens (GPT-2 XL widths), f32 with TF32 products; CPU: the tiny model's widths
//! at its training batch (2 x 256 tokens). On CUDA the driver's memory pool keeps freed memory
//! (a caching allocator, as PyTorch has; see `gpt2::ops::keep_pool_memory`). Each run is `y.backward()` of the layer's output
//! (seed gradient all ones) for x, W and b, and the forward alone; medians of `--iters` runs after warm-ups. Prints a
//! markdown table with the CUDA floor (6 n d_in d_out flops at `--peak-tflops`).
use candle_core::{Device, Tensor, Var};
use clap::Parser;
use gpt2::ops::{linear_train, Activation};

mod common;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Tokens (rows of x); default 2048 on CUDA, 512 on the CPU.
    #[arg(long)]
    tokens: Option<usize>,
    #[arg(long, default_value_t = 20)]
    iters: usize,
    /// Dense peak used for the floor: H200 TF32 494 TFLOP/s.
    #[arg(long, default_value_t = 494.0)]
    peak_tflops: f64,
}

/// Median seconds of `f` over `iters` runs after two warm-ups, synchronizing the device.
fn time(
    dev: &Device,
    iters: usize,
    f: impl FnMut() -> candle_core::Result<()>,
) -> candle_core::Result<f64> {
    common::median_secs(dev, 2, iters, f)
}

/// The composed path: `x W + b` (on CUDA the bias through a rank-1 product, as the model did),
/// then candle's `gelu`.
fn composed(x: &Tensor, w: &Tensor, b: &Tensor, act: Activation) -> candle_core::Result<Tensor> {
    let n = x.dim(0)?;
    let y = x.matmul(w)?;
    let y = if x.device().is_cpu() {
        y.broadcast_add(b)?
    } else {
        let ones = Tensor::ones((n, 1), y.dtype(), y.device())?;
        (y + ones.matmul(&b.reshape((1, ()))?)?)?
    };
    match act {
        Activation::Identity => Ok(y),
        Activation::Gelu => y.gelu(),
    }
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let dev = common::device(&a.device)?;
    candle_core::cuda::set_gemm_reduced_precision_f32(true);
    // Freed memory stays in the pool, as in PyTorch's caching allocator.
    #[cfg(feature = "cuda")]
    if dev.is_cuda() {
        gpt2::ops::keep_pool_memory(&dev)?;
    }
    let (n, shapes) = if dev.is_cuda() {
        (
            a.tokens.unwrap_or(2048),
            vec![
                (1600, 4800, Activation::Identity),
                (1600, 6400, Activation::Gelu),
                (6400, 1600, Activation::Identity),
            ],
        )
    } else {
        (
            a.tokens.unwrap_or(512),
            vec![
                (128, 384, Activation::Identity),
                (128, 512, Activation::Gelu),
                (512, 128, Activation::Identity),
            ],
        )
    };
    println!(
        "| device | n | d_in | d_out | act | floor ms | linear_train ms | composed ms | \
         linear_train fwd ms | composed fwd ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (d_in, d_out, act) in shapes {
        let x = Var::from_tensor(&Tensor::randn(0f32, 1.0, (n, d_in), &dev)?)?;
        let w = Var::from_tensor(&Tensor::randn(0f32, 0.02, (d_in, d_out), &dev)?)?;
        let b = Var::from_tensor(&Tensor::randn(0f32, 0.5, d_out, &dev)?)?;
        let fused = time(&dev, a.iters, || {
            linear_train(&x, &w, &b, act)?.backward().map(drop)
        })?;
        let reference = time(&dev, a.iters, || {
            composed(&x, &w, &b, act)?.backward().map(drop)
        })?;
        let fused_fwd = time(&dev, a.iters, || linear_train(&x, &w, &b, act).map(drop))?;
        let reference_fwd = time(&dev, a.iters, || composed(&x, &w, &b, act).map(drop))?;
        let floor = if dev.is_cuda() {
            format!(
                "{:.3}",
                6.0 * (n * d_in * d_out) as f64 / (a.peak_tflops * 1e12) * 1e3
            )
        } else {
            "–".into()
        };
        println!(
            "| {} | {n} | {d_in} | {d_out} | {act:?} | {floor} | {:.3} | {:.3} | {:.3} | {:.3} |",
            if dev.is_cuda() {
                "cuda f32/TF32"
            } else {
                "cpu f32"
            },
            fused * 1e3,
            reference * 1e3,
            fused_fwd * 1e3,
            reference_fwd * 1e3
        );
    }
    Ok(())
}
