//! Forward-pass and per-op timings of GPT-2 on one device, for docs/perf/activations.md.
//!
//!     cargo run --release -p activations --features cuda,bench --example forward_bench -- --device cuda
//!
//! Prints a markdown table: tokens/s of `forward_hooks` to the given depth (with and without
//! chunked attention) and milliseconds of the ops one block is made of, at the model's shapes.
use candle_core::{Device, Tensor};
use clap::Parser;
use gpt2::ops::{causal_attention_with, layer_norm, linear, AttentionKernel, Epilogue};
use gpt2::{Gpt2, Gpt2Config, HookPoint};
use runtime::device::{parse_device, parse_dtype};

mod common;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "xl")]
    size: String,
    #[arg(long, default_value = "bf16")]
    dtype: String,
    #[arg(long, default_value = "cpu")]
    device: String,
    #[arg(long, default_value_t = 16)]
    batch: usize,
    #[arg(long, default_value_t = 1024)]
    ctx: usize,
    #[arg(long, default_value_t = 24)]
    depth: usize,
    #[arg(long, default_value_t = 5)]
    iters: usize,
}

/// One timed op: name, shape, and the call.
type Op<'a> = Box<dyn Fn() -> anyhow::Result<Tensor> + 'a>;

/// Median seconds of `f` over `iters` runs after one warm-up, synchronizing the device.
fn time(dev: &Device, iters: usize, f: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<f64> {
    common::median_secs(dev, 1, iters, f)
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let dev = parse_device(&a.device)?;
    let dtype = parse_dtype("dtype", &a.dtype)?;
    let cfg = Gpt2Config::by_name(&a.size).ok_or_else(|| anyhow::anyhow!("unknown size"))?;
    let (b, t, d, h) = (a.batch, a.ctx, cfg.n_embd, cfg.n_head);
    let mut model = Gpt2::random(cfg.clone(), 0, dtype, &dev)?;
    let tokens = Tensor::from_vec(
        (0..b * t)
            .map(|i| (i * 7919 % 50257) as u32)
            .collect::<Vec<_>>(),
        (b, t),
        &dev,
    )?;
    let hook = [HookPoint::ResidPre(a.depth)];
    println!("| what | shape | ms | tokens/s |");
    println!("|---|---|---|---|");
    let n_tok = (b * (t - 1)) as f64;
    for (fused, chunk) in [(true, None), (false, Some(256)), (false, None)] {
        model.set_fused_kernels(fused);
        model.set_attention_chunk(chunk);
        let s = time(&dev, a.iters, || {
            model.forward_hooks(&tokens, &hook)?;
            Ok(())
        })?;
        let how = if model.uses_fused_kernels() {
            "fused kernels".to_string()
        } else {
            format!("candle ops, chunk {chunk:?}")
        };
        println!(
            "| forward to blocks.{}.hook_resid_pre, {how} | {b} x {t} {} | {:.1} | {:.3e} |",
            a.depth,
            a.dtype,
            s * 1e3,
            n_tok / s
        );
    }
    let n = b * t;
    let x = Tensor::randn(0f32, 1.0, (n, d), &dev)?.to_dtype(dtype)?;
    let w = Tensor::randn(0f32, 0.02, (d, 3 * d), &dev)?.to_dtype(dtype)?;
    let bias = Tensor::randn(0f32, 0.02, 3 * d, &dev)?.to_dtype(dtype)?;
    let y = x.matmul(&w)?;
    let ones = Tensor::ones((n, 1), dtype, &dev)?;
    let scores = Tensor::randn(0f32, 1.0, (b, h, 256, t), &dev)?.to_dtype(dtype)?;
    let mask = Tensor::zeros((256, t), dtype, &dev)?;
    let mask_full = mask.broadcast_as((b, h, 256, t))?.contiguous()?;
    let qkv = y.reshape((b, t, 3 * d))?;
    let w_fc = Tensor::randn(0f32, 0.02, (d, 4 * d), &dev)?.to_dtype(dtype)?;
    let b_fc = bias.narrow(0, 0, d)?.repeat(4)?;
    let w_proj = Tensor::randn(0f32, 0.02, (4 * d, d), &dev)?.to_dtype(dtype)?;
    let h_fc = x.matmul(&w_fc)?;
    #[cfg(feature = "cuda")]
    let host = std::sync::Mutex::new(vec![0u8; n * d * dtype.size_in_bytes()]);
    #[cfg(feature = "cuda")]
    let copier = if dev.is_cuda() {
        Some(gpt2::ops::PinnedCopier::new(&dev)?)
    } else {
        None
    };
    // The layer norms' weight and bias (one view of `bias`, made once outside the timed calls).
    let ln_weight = bias.narrow(0, 0, d)?;
    #[cfg_attr(not(feature = "cuda"), allow(unused_mut))]
    let mut ops: Vec<(&str, String, Op)> = vec![
        (
            "fused causal attention (Auto kernel)",
            format!("[{b},{t},3x{h}x{}]", d / h),
            Box::new(|| Ok(causal_attention_with(&qkv, h, AttentionKernel::Auto)?)),
        ),
        (
            "fused causal attention (Scalar kernel)",
            format!("[{b},{t},3x{h}x{}]", d / h),
            Box::new(|| Ok(causal_attention_with(&qkv, h, AttentionKernel::Scalar)?)),
        ),
        (
            "linear + bias (c_attn)",
            format!("[{n},{d}]x[{d},{}]", 3 * d),
            Box::new(|| Ok(linear(&x, &w, &bias, Epilogue::Bias)?)),
        ),
        (
            "linear + bias + gelu (c_fc)",
            format!("[{n},{d}]x[{d},{}]", 4 * d),
            Box::new(|| Ok(linear(&x, &w_fc, &b_fc, Epilogue::BiasGelu)?)),
        ),
        (
            "linear + bias + residual (mlp c_proj)",
            format!("[{n},{}]x[{},{d}]", 4 * d, 4 * d),
            Box::new(|| {
                Ok(linear(
                    &h_fc,
                    &w_proj,
                    &bias.narrow(0, 0, d)?,
                    Epilogue::BiasResidual(&x),
                )?)
            }),
        ),
        (
            "layer_norm (fused kernel)",
            format!("[{n},{d}]"),
            Box::new(|| Ok(layer_norm(&x, &ln_weight, &ln_weight, 1e-5)?)),
        ),
        (
            "matmul (candle) mlp c_proj",
            format!("[{n},{}]x[{},{d}]", 4 * d, 4 * d),
            Box::new(|| Ok(h_fc.matmul(&w_proj)?)),
        ),
        (
            "matmul x W (c_attn)",
            format!("[{n},{d}]x[{d},{}]", 3 * d),
            Box::new(|| Ok(x.matmul(&w)?)),
        ),
        (
            "bias broadcast_add",
            format!("[{n},{}]+[{}]", 3 * d, 3 * d),
            Box::new(|| Ok(y.broadcast_add(&bias)?)),
        ),
        (
            "bias by rank-1 GEMM + add",
            format!("[{n},{}]", 3 * d),
            Box::new(|| Ok((&y + ones.matmul(&bias.reshape((1, 3 * d))?)?)?)),
        ),
        (
            "mask broadcast_add",
            format!("[{b},{h},256,{t}]+[256,{t}]"),
            Box::new(|| Ok(scores.broadcast_add(&mask)?)),
        ),
        (
            "mask contiguous add",
            format!("[{b},{h},256,{t}]"),
            Box::new(|| Ok((&scores + &mask_full)?)),
        ),
        (
            "softmax_last_dim",
            format!("[{b},{h},256,{t}]"),
            Box::new(|| Ok(candle_nn::ops::softmax_last_dim(&scores)?)),
        ),
        (
            "qkv permute copy (5-D)",
            format!("[{b},{t},3,{h},{}]", d / h),
            Box::new(|| {
                Ok(y.reshape((b, t, 3, h, d / h))?
                    .permute((2, 0, 3, 1, 4))?
                    .contiguous()?)
            }),
        ),
        (
            "gelu",
            format!("[{n},{}]", 3 * d),
            Box::new(|| Ok(y.gelu()?)),
        ),
        (
            "layer_norm",
            format!("[{n},{d}]"),
            Box::new(|| {
                Ok(candle_nn::ops::layer_norm(
                    &x, &ln_weight, &ln_weight, 1e-5,
                )?)
            }),
        ),
        (
            "to host (copy)",
            format!("[{n},{d}]"),
            Box::new(|| Ok(x.to_device(&Device::Cpu)?)),
        ),
    ];
    #[cfg(feature = "cuda")]
    if let Some(c) = &copier {
        ops.push((
            "to host (pinned, async stream)",
            format!("[{n},{d}]"),
            Box::new(|| {
                // Into a buffer whose pages are already touched, as the extraction pipeline does.
                let mut out = host.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
                out.clear();
                c.finish(c.start(&x)?, &mut out)?;
                Ok(x.clone())
            }),
        ));
    }
    for (name, shape, f) in ops {
        let s = time(&dev, a.iters, || {
            f()?;
            Ok(())
        })?;
        println!("| {name} | {shape} {} | {:.3} | |", a.dtype, s * 1e3);
    }
    Ok(())
}
