//! Forward and forward+backward times of the differentiable causal attention
//! (`ops::causal_attention_train`) beside the composed candle ops the GPT-2 training path used
//! (permute + copy, scale, q·kᵀ, mask add, `candle_nn::ops::softmax`, ·v, transpose + copy).
//!
//!     cargo run --release -p activations --features bench --example attention_train_bench -- --device cpu
//!     cargo run --release -p activations --features cuda,bench --example attention_train_bench -- --device cuda
//!
//! Shapes are `BxTxHxHD`; f32, TF32 GEMMs on CUDA unless `--no-tf32`; `--gemm pointers` selects the
//! op's pointer-array batched GEMMs. Prints a markdown table of
//! medians (the device synchronized after each call; the backward seeds d(out) with ones).
use candle_core::{Device, Tensor, Var, D};
use clap::Parser;
use gpt2::ops::{causal_attention_train_with, AttentionGemms};
use runtime::device::parse_device;

mod common;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Shapes BxTxHxHD; default 2x256x4x32 (the tiny CPU config) on the CPU, GPT-2 Medium and XL
    /// heads at 4 x 512 on CUDA.
    #[arg(long, num_args = 1..)]
    shapes: Vec<String>,
    #[arg(long, default_value_t = 20)]
    iters: usize,
    #[arg(long)]
    no_tf32: bool,
    /// How the CUDA products are batched: `strided` (one strided-batched GEMM per sequence, the
    /// op's default) or `pointers` (one pointer-array batched GEMM over all sequences and heads).
    #[arg(long, default_value = "strided", value_parser = ["strided", "pointers"])]
    gemm: String,
}

/// Median seconds of `f` over `iters` runs after two warm-ups, synchronizing the device.
fn time(dev: &Device, iters: usize, f: impl Fn() -> anyhow::Result<()>) -> anyhow::Result<f64> {
    common::median_secs(dev, 2, iters, f)
}

/// The composed-op attention of the GPT-2 training path.
fn composed(qkv: &Tensor, mask: &Tensor, h: usize) -> candle_core::Result<Tensor> {
    let (b, t, three_d) = qkv.dims3()?;
    let (d, hd) = (three_d / 3, three_d / 3 / h);
    let x = qkv
        .reshape((b, t, 3, h, hd))?
        .permute((2, 0, 3, 1, 4))?
        .contiguous()?;
    let q = (x.get(0)? * (1.0 / (hd as f64).sqrt()))?;
    let (k, v) = (x.get(1)?, x.get(2)?);
    let scores = q.matmul(&k.t()?)?.broadcast_add(mask)?;
    let probs = candle_nn::ops::softmax(&scores, D::Minus1)?;
    probs
        .matmul(&v)?
        .transpose(1, 2)?
        .contiguous()?
        .reshape((b, t, d))
}

fn parse_shape(s: &str) -> anyhow::Result<[usize; 4]> {
    let v: Vec<usize> = s
        .split('x')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("shape `{s}`: {e}"))?;
    v.try_into()
        .map_err(|_| anyhow::anyhow!("shape `{s}`: expected BxTxHxHD"))
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let dev = parse_device(&a.device)?;
    let gemms = match a.gemm.as_str() {
        "pointers" => AttentionGemms::PointerArrays,
        _ => AttentionGemms::PerSequence,
    };
    let tf32 = dev.is_cuda() && !a.no_tf32;
    candle_core::cuda::set_gemm_reduced_precision_f32(tf32);
    let shapes = match (a.shapes.is_empty(), dev.is_cuda()) {
        (false, _) => a.shapes.clone(),
        (true, false) => vec!["2x256x4x32".into()],
        (true, true) => vec!["4x512x16x64".into(), "4x512x25x64".into()],
    };
    println!("| device | b x t x h x hd | GEMMs | ours fwd ms | ours fwd+bwd ms | composed candle fwd+bwd ms | composed / ours |");
    println!("|---|---|---|---|---|---|---|");
    for s in &shapes {
        let [b, t, h, hd] = parse_shape(s)?;
        let d = h * hd;
        let qkv = Var::from_tensor(&Tensor::randn(0f32, 1.0, (b, t, 3 * d), &dev)?)?;
        let mask = gpt2::causal_mask(0, t, &dev)?;
        let fwd = time(&dev, a.iters, || {
            causal_attention_train_with(qkv.as_tensor(), h, gemms)?;
            Ok(())
        })?;
        let ours = time(&dev, a.iters, || {
            causal_attention_train_with(qkv.as_tensor(), h, gemms)?.backward()?;
            Ok(())
        })?;
        let theirs = time(&dev, a.iters, || {
            composed(qkv.as_tensor(), &mask, h)?.backward()?;
            Ok(())
        })?;
        let precision = match (dev.is_cuda(), tf32) {
            (false, _) => "f32",
            (true, true) => "TF32",
            (true, false) => "f32 (no TF32)",
        };
        let label = match gemms {
            AttentionGemms::PointerArrays if dev.is_cuda() => {
                format!("{precision}, pointer arrays")
            }
            _ => precision.to_string(),
        };
        println!(
            "| {} | {b} x {t} x {h} x {hd} | {label} | {:.3} | {:.3} | {:.3} | {:.2}x |",
            a.device,
            fwd * 1e3,
            ours * 1e3,
            theirs * 1e3,
            theirs / ours
        );
    }
    Ok(())
}
