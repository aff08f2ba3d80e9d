//! The fused forward ops (causal attention on the packed c_attn output, linear layers with bias,
//! GELU or residual epilogues) against float64 references, on the CPU and, in a CUDA build with a
//! GPU, on the GPU: one test body for both. Shapes include batch 1, T = 1 and T not a multiple of
//! the kernels' 64-row tiles.
//!
//! `tests/fixtures/gpt2-ref-hd64` is the float64 reference of tools/gpt2_reference.py for a model
//! with head size 64 (so CUDA takes the fused path), written with
//! `python3 -c "import sys; sys.path.insert(0, 'tools'); import gpt2_reference as g;
//! g.CFG.update(n_embd=64, n_head=1, n_positions=72, vocab_size=96); g.SEQ = 70;
//! g.main('gpt2/tests/fixtures/gpt2-ref-hd64')"`.
use crate::common;
use gpt2::ops::{causal_attention_with, layer_norm, linear, AttentionKernel, Epilogue};
use gpt2::{Gpt2, Gpt2Config, HookPoint};

use candle_core::{DType, Device, Tensor, D};
use common::{devices, gelu_tanh, host_f64, max_abs_diff, randn};
use runtime::test_device;

/// Causal attention in float64 from candle's composite ops: [B, T, 3 H hd] -> [B, T, H hd].
fn attention_reference(qkv: &Tensor, h: usize) -> Tensor {
    let (b, t, three_d) = qkv.dims3().unwrap();
    let hd = three_d / 3 / h;
    let x = qkv
        .to_dtype(DType::F64)
        .unwrap()
        .reshape((b, t, 3, h, hd))
        .unwrap()
        .permute((2, 0, 3, 1, 4))
        .unwrap()
        .contiguous()
        .unwrap();
    let (q, k, v) = (x.get(0).unwrap(), x.get(1).unwrap(), x.get(2).unwrap());
    let scores = (q.matmul(&k.t().unwrap()).unwrap() / (hd as f64).sqrt()).unwrap();
    let mask = gpt2::causal_mask(0, t, &Device::Cpu)
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap();
    let p = candle_nn::ops::softmax(&scores.broadcast_add(&mask).unwrap(), D::Minus1).unwrap();
    p.matmul(&v)
        .unwrap()
        .transpose(1, 2)
        .unwrap()
        .contiguous()
        .unwrap()
        .reshape((b, t, h * hd))
        .unwrap()
}

fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 2e-5,
        DType::F16 => 4e-3,
        _ => 3e-2,
    }
}

test_device!(
    causal_attention_matches_float64_reference,
    causal_attention_matches_float64_reference_on
);
fn causal_attention_matches_float64_reference_on(device: &Device) -> anyhow::Result<()> {
    // (batch, sequence length, heads, score scale): T = 1, tails of 1 and 36 rows past a 64-row
    // tile, and large scores that test the online softmax's rescaling.
    let cases = [
        (1, 1, 1, 1.0),
        (1, 7, 2, 1.0),
        (2, 64, 3, 1.0),
        (2, 100, 2, 1.0),
        (1, 129, 1, 1.0),
        (3, 200, 2, 6.0),
    ];
    let hd = 64;
    let device = device.clone();
    for (i, &(b, t, h, scale)) in cases.iter().enumerate() {
        let qkv64 = (randn(&[b, t, 3 * h * hd], 1.0, i as u64) * (scale / 8f64.sqrt())).unwrap();
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            // The reference starts from the values the op sees (rounded to `dtype`).
            let qkv = qkv64.to_dtype(dtype).unwrap();
            let want = attention_reference(&qkv, h);
            for kernel in [AttentionKernel::Auto, AttentionKernel::Scalar] {
                let got =
                    causal_attention_with(&qkv.to_device(&device).unwrap(), h, kernel).unwrap();
                assert_eq!(got.dtype(), dtype);
                let err = max_abs_diff(&got, &want);
                assert!(
                    err < tolerance(dtype),
                    "{device:?} {dtype:?} {kernel:?} b {b} t {t} h {h} scale {scale}: error {err}"
                );
            }
        }
    }
    Ok(())
}

test_device!(
    causal_attention_rejects_a_bad_shape,
    causal_attention_rejects_a_bad_shape_on
);
fn causal_attention_rejects_a_bad_shape_on(device: &Device) -> anyhow::Result<()> {
    let device = device.clone();
    let x = Tensor::zeros((1, 4, 3 * 64 + 1), DType::F32, &device).unwrap();
    assert!(causal_attention_with(&x, 1, AttentionKernel::Auto).is_err());
    assert!(
        causal_attention_with(&x.narrow(2, 0, 192).unwrap(), 0, AttentionKernel::Auto).is_err()
    );
    Ok(())
}

test_device!(
    linear_epilogues_match_float64_reference,
    linear_epilogues_match_float64_reference_on
);
fn linear_epilogues_match_float64_reference_on(device: &Device) -> anyhow::Result<()> {
    // Rows and widths that are not multiples of the GEMM tiles; a leading batch dimension.
    let (rows, d_in, d_out) = (37, 96, 160);
    let x64 = randn(&[rows, d_in], 1.0, 11);
    let w64 = randn(&[d_in, d_out], 0.1, 12);
    let b64 = randn(&[d_out], 0.5, 13);
    let r64 = randn(&[rows, d_out], 1.0, 14);
    let device = device.clone();
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        let on = |t: &Tensor| t.to_dtype(dtype).unwrap().to_device(&device).unwrap();
        let back = |t: &Tensor| t.to_dtype(dtype).unwrap().to_dtype(DType::F64).unwrap();
        let (x, w, b, r) = (on(&x64), on(&w64), on(&b64), on(&r64));
        let y = back(&x64)
            .matmul(&back(&w64))
            .unwrap()
            .broadcast_add(&back(&b64))
            .unwrap();
        let wants = [
            ("bias", y.clone()),
            ("bias+gelu", gelu_tanh(&y)),
            ("bias+residual", (&y + back(&r64)).unwrap()),
        ];
        for (name, want) in wants {
            let epilogue = match name {
                "bias" => Epilogue::Bias,
                "bias+gelu" => Epilogue::BiasGelu,
                _ => Epilogue::BiasResidual(&r),
            };
            let got = linear(&x, &w, &b, epilogue).unwrap();
            assert_eq!(got.dtype(), dtype);
            let err = max_abs_diff(&got, &want);
            // Products of d_in = 96 terms; f32 without TF32 (the default) stays near 1e-6.
            let tol = match dtype {
                DType::F32 => 1e-4,
                DType::F16 => 1e-2,
                _ => 6e-2,
            };
            assert!(err < tol, "{device:?} {dtype:?} {name}: error {err}");
        }
        // A 3-D input keeps its leading dimensions.
        let got = linear(&x.reshape((1, rows, d_in)).unwrap(), &w, &b, Epilogue::Bias).unwrap();
        assert_eq!(got.dims(), [1, rows, d_out]);
        assert!(linear(&x, &w.t().unwrap(), &b, Epilogue::Bias).is_err());
    }
    Ok(())
}

test_device!(
    layer_norm_matches_float64_reference,
    layer_norm_matches_float64_reference_on
);
fn layer_norm_matches_float64_reference_on(device: &Device) -> anyhow::Result<()> {
    // A row wider than a warp's stride and not a multiple of it; a large common offset (the
    // mean is subtracted before squaring); rows not a multiple of the block's 8.
    let (rows, d) = (13, 1000);
    let x64 = (randn(&[rows, d], 2.0, 21) + 50.0).unwrap();
    let w64 = (randn(&[d], 0.3, 22) + 1.0).unwrap();
    let b64 = randn(&[d], 0.3, 23);
    let device = device.clone();
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        let on = |t: &Tensor| t.to_dtype(dtype).unwrap().to_device(&device).unwrap();
        let back = |t: &Tensor| t.to_dtype(dtype).unwrap().to_dtype(DType::F64).unwrap();
        let x = back(&x64);
        let mean = x.mean_keepdim(1).unwrap();
        let c = x.broadcast_sub(&mean).unwrap();
        let var = c.sqr().unwrap().mean_keepdim(1).unwrap();
        let want = c
            .broadcast_div(&(var + 1e-5).unwrap().sqrt().unwrap())
            .unwrap()
            .broadcast_mul(&back(&w64))
            .unwrap()
            .broadcast_add(&back(&b64))
            .unwrap();
        let got = layer_norm(
            &on(&x64).reshape((1, rows, d)).unwrap(),
            &on(&w64),
            &on(&b64),
            1e-5,
        )
        .unwrap();
        assert_eq!(got.dims(), [1, rows, d]);
        let tol = match dtype {
            DType::F32 => 1e-4,
            DType::F16 => 1e-2,
            _ => 6e-2,
        };
        let err = max_abs_diff(&got.squeeze(0).unwrap(), &want);
        assert!(err < tol, "{device:?} {dtype:?}: error {err}");
    }
    assert!(layer_norm(
        &Tensor::zeros((2, 4), DType::F32, &device).unwrap(),
        &Tensor::ones(3, DType::F32, &device).unwrap(),
        &Tensor::zeros(4, DType::F32, &device).unwrap(),
        1e-5
    )
    .is_err());
    Ok(())
}

/// Largest |a - b| / (1 + |b|).
fn max_rel_err(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.dims(), b.dims());
    let (a, b) = (host_f64(a), host_f64(b));
    let den = (b.abs().unwrap() + 1.0).unwrap();
    let err = ((a - &b).unwrap().abs().unwrap() / den).unwrap();
    err.flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f64>()
        .unwrap()
}

test_device!(
    fused_forward_matches_float64_reference,
    fused_forward_matches_float64_reference_on
);
fn fused_forward_matches_float64_reference_on(device: &Device) -> anyhow::Result<()> {
    let dir = runtime::workspace_file("gpt2/tests/fixtures/gpt2-ref-hd64");
    let r =
        candle_core::safetensors::load(dir.join("reference.safetensors"), &Device::Cpu).unwrap();
    let hooks = [
        (HookPoint::ResidPre(0), "resid_pre.0"),
        (HookPoint::ResidPost(0), "resid_post.0"),
        (HookPoint::ResidPost(1), "resid_post.1"),
        (HookPoint::LnFinal, "ln_final"),
    ];
    let device = device.clone();
    let model = Gpt2::load(dir.to_str().unwrap(), DType::F32, &device).unwrap();
    assert_eq!(model.uses_fused_kernels(), device.is_cuda());
    let tokens = r["tokens"].to_device(&device).unwrap();
    let points: Vec<HookPoint> = hooks.iter().map(|(h, _)| *h).collect();
    let acts = model.forward_hooks(&tokens, &points).unwrap();
    for ((h, key), a) in hooks.iter().zip(&acts) {
        let err = max_rel_err(a, &r[*key]);
        assert!(err < 1e-5, "{device:?} {h}: error {err}");
    }
    let logits = model.forward_logits(&tokens).unwrap();
    let err = max_rel_err(&logits, &r["logits"]);
    // The logits are the deepest output: cuBLAS's f32 accumulation order and the epilogue's
    // GELU add a little on CUDA (1.7e-5 measured on the H200); TF32 would give about 1e-3.
    let tolerance = if device.is_cuda() { 5e-5 } else { 1e-5 };
    assert!(err < tolerance, "{device:?} logits: error {err}");
    Ok(())
}

/// A GPT-2 with head size 64 (the fused kernels'), random weights and non-zero biases and norm
/// parameters, written in the Hugging Face layout to `dir`.
fn write_head64_model(dir: &std::path::Path) {
    let cfg = Gpt2Config {
        vocab_size: 128,
        n_positions: 160,
        n_embd: 128,
        n_layer: 2,
        n_head: 2,
        layer_norm_epsilon: 1e-5,
    };
    let base = Gpt2::random(cfg.clone(), 5, DType::F32, &Device::Cpu).unwrap();
    let tensors: std::collections::HashMap<String, Tensor> = base
        .named_tensors()
        .into_iter()
        .enumerate()
        .map(|(i, (name, t))| {
            let t = if name.contains("ln_") {
                (randn(t.dims(), 0.2, 100 + i as u64) + 1.0).unwrap()
            } else if name.ends_with(".bias") {
                randn(t.dims(), 0.1, 100 + i as u64)
            } else {
                t.to_dtype(DType::F64).unwrap()
            };
            (name, t.to_dtype(DType::F32).unwrap())
        })
        .collect();
    candle_core::safetensors::save(&tensors, dir.join("model.safetensors")).unwrap();
    let config = format!(
        r#"{{"vocab_size": {}, "n_positions": {}, "n_embd": {}, "n_layer": {}, "n_head": {}, "layer_norm_epsilon": 1e-5}}"#,
        cfg.vocab_size, cfg.n_positions, cfg.n_embd, cfg.n_layer, cfg.n_head
    );
    std::fs::write(dir.join("config.json"), config).unwrap();
}

#[test]
fn fused_forward_matches_the_cpu_forward() {
    let dir = tempfile::tempdir().unwrap();
    write_head64_model(dir.path());
    let path = dir.path().to_str().unwrap();
    let tokens: Vec<u32> = (0..2 * 150).map(|i| (i * 37 % 128) as u32).collect();
    let tok = Tensor::from_vec(tokens, (2, 150), &Device::Cpu).unwrap();
    let hooks = [HookPoint::ResidPost(0), HookPoint::LnFinal];
    for dtype in [DType::F32, DType::BF16] {
        let want = Gpt2::load(path, dtype, &Device::Cpu)
            .unwrap()
            .forward_hooks(&tok, &hooks)
            .unwrap();
        for device in devices() {
            let mut model = Gpt2::load(path, dtype, &device).unwrap();
            for fused in [true, false] {
                model.set_fused_kernels(fused);
                assert_eq!(model.uses_fused_kernels(), fused && device.is_cuda());
                let got = model
                    .forward_hooks(&tok.to_device(&device).unwrap(), &hooks)
                    .unwrap();
                for (g, w) in got.iter().zip(&want) {
                    let err = max_abs_diff(g, w);
                    let tol = if dtype == DType::F32 { 1e-4 } else { 0.15 };
                    assert!(err < tol, "{device:?} {dtype:?} fused {fused}: error {err}");
                }
            }
        }
    }
}
