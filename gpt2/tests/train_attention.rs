//! The differentiable causal attention against a float64 reference built from candle's composed
//! ops with backprop on the CPU: the output and d(qkv) of loss = sum(out * w), on every device,
//! with candle's TF32 flag off and on for CUDA.
mod common;

use candle_core::{DType, Device, Tensor, Var, D};
use common::{devices, max_abs, max_abs_diff, randn};
use gpt2::ops::{causal_attention_train, causal_attention_train_with, AttentionGemms};
use runtime::test_device;
use std::sync::Mutex;

/// candle's TF32 flag is process-wide: every test that runs the op holds this lock.
static TF32_FLAG: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    TF32_FLAG.lock().unwrap_or_else(|e| e.into_inner())
}

struct Case {
    b: usize,
    t: usize,
    h: usize,
    hd: usize,
    /// Standard deviation of qkv: 3 and 12 make the scores large and the softmax nearly one-hot.
    std: f64,
    /// Tolerance of the TF32 GEMMs, relative to the reference's largest magnitude.
    tf32_tol: f64,
}

const F32_TOL: f64 = 5e-5;

const CASES: &[Case] = &[
    Case {
        b: 1,
        t: 1,
        h: 1,
        hd: 16,
        std: 1.0,
        tf32_tol: 2e-2,
    },
    Case {
        b: 1,
        t: 2,
        h: 1,
        hd: 64,
        std: 1.0,
        tf32_tol: 2e-2,
    },
    Case {
        b: 2,
        t: 37,
        h: 3,
        hd: 16,
        std: 1.0,
        tf32_tol: 2e-2,
    },
    Case {
        b: 2,
        t: 64,
        h: 4,
        hd: 64,
        std: 1.0,
        tf32_tol: 2e-2,
    },
    Case {
        b: 1,
        t: 130,
        h: 2,
        hd: 64,
        std: 1.0,
        tf32_tol: 2e-2,
    },
    Case {
        b: 3,
        t: 16,
        h: 5,
        hd: 8,
        std: 1.0,
        tf32_tol: 2e-2,
    },
    Case {
        b: 2,
        t: 33,
        h: 2,
        hd: 64,
        std: 3.0,
        tf32_tol: 5e-2,
    },
    Case {
        b: 1,
        t: 9,
        h: 2,
        hd: 16,
        std: 12.0,
        tf32_tol: 0.1,
    },
];

/// (out, d qkv) in f64 through candle's composed ops: the training path of the GPT-2 block.
fn reference(qkv: &Tensor, w: &Tensor, h: usize) -> candle_core::Result<(Tensor, Tensor)> {
    let (b, t, three_d) = qkv.dims3()?;
    let (d, hd) = (three_d / 3, three_d / 3 / h);
    let var = Var::from_tensor(&qkv.to_dtype(DType::F64)?)?;
    let x = var
        .as_tensor()
        .reshape((b, t, 3, h, hd))?
        .permute((2, 0, 3, 1, 4))?
        .contiguous()?;
    let (q, k, v) = (x.get(0)?, x.get(1)?, x.get(2)?);
    let mask: Vec<f64> = (0..t * t)
        .map(|ij| if ij % t > ij / t { -1e30 } else { 0.0 })
        .collect();
    let mask = Tensor::from_vec(mask, (t, t), &Device::Cpu)?;
    let scores = (q.matmul(&k.t()?)? * (1.0 / (hd as f64).sqrt()))?.broadcast_add(&mask)?;
    let probs = candle_nn::ops::softmax(&scores, D::Minus1)?;
    let y = probs
        .matmul(&v)?
        .transpose(1, 2)?
        .contiguous()?
        .reshape((b, t, d))?;
    let grads = (&y * w.to_dtype(DType::F64)?)?.sum_all()?.backward()?;
    let dx = grads.get(var.as_tensor()).expect("gradient of qkv").clone();
    Ok((y, dx))
}

/// (out, d qkv) of the op on `dev` in f32.
fn ours(qkv: &Tensor, w: &Tensor, h: usize, dev: &Device) -> candle_core::Result<(Tensor, Tensor)> {
    ours_with(qkv, w, h, dev, AttentionGemms::PerSequence)
}

/// [`ours`] with the CUDA products batched as `gemms` says.
fn ours_with(
    qkv: &Tensor,
    w: &Tensor,
    h: usize,
    dev: &Device,
    gemms: AttentionGemms,
) -> candle_core::Result<(Tensor, Tensor)> {
    let var = Var::from_tensor(&qkv.to_dtype(DType::F32)?.to_device(dev)?)?;
    let y = causal_attention_train_with(var.as_tensor(), h, gemms)?;
    let w = w.to_dtype(DType::F32)?.to_device(dev)?;
    let grads = (&y * w)?.sum_all()?.backward()?;
    let dx = grads.get(var.as_tensor()).expect("gradient of qkv").clone();
    Ok((y, dx))
}

/// The flag states to run on `dev`: the CPU ignores the flag.
fn tf32_states(dev: &Device) -> Vec<bool> {
    if dev.is_cuda() {
        vec![false, true]
    } else {
        vec![false]
    }
}

/// The GEMM batchings to run on `dev`: the CPU ignores them.
fn gemm_states(dev: &Device) -> Vec<AttentionGemms> {
    if dev.is_cuda() {
        vec![AttentionGemms::PerSequence, AttentionGemms::PointerArrays]
    } else {
        vec![AttentionGemms::PerSequence]
    }
}

#[test]
fn matches_the_f64_reference_forward_and_backward() {
    let _guard = lock();
    let mut failures = Vec::new();
    for (n, c) in CASES.iter().enumerate() {
        let d = c.h * c.hd;
        let qkv = randn(&[c.b, c.t, 3 * d], c.std, 100 + n as u64);
        let w = randn(&[c.b, c.t, d], 1.0, 200 + n as u64);
        let (y_ref, dx_ref) = reference(&qkv, &w, c.h).unwrap();
        let (y_scale, dx_scale) = (max_abs(&y_ref), max_abs(&dx_ref));
        for dev in devices() {
            for (tf32, gemms) in tf32_states(&dev)
                .into_iter()
                .flat_map(|tf32| gemm_states(&dev).into_iter().map(move |g| (tf32, g)))
            {
                candle_core::cuda::set_gemm_reduced_precision_f32(tf32);
                let (y, dx) = ours_with(&qkv, &w, c.h, &dev, gemms).unwrap();
                candle_core::cuda::set_gemm_reduced_precision_f32(false);
                assert_eq!(y.dims(), [c.b, c.t, d]);
                assert_eq!(dx.dims(), [c.b, c.t, 3 * d]);
                let tol = if tf32 { c.tf32_tol } else { F32_TOL };
                let ey = max_abs_diff(&y, &y_ref) / y_scale;
                let edx = max_abs_diff(&dx, &dx_ref) / dx_scale;
                println!(
                    "{dev:?} tf32={tf32} {gemms:?} b={} t={} h={} hd={} std={}: out {ey:.2e}, d qkv {edx:.2e} (relative to the largest)",
                    c.b, c.t, c.h, c.hd, c.std
                );
                if ey > tol || edx > tol {
                    failures.push(format!(
                        "{dev:?} tf32={tf32} {gemms:?} case {n}: out error {ey:.3e}, d qkv error {edx:.3e} > {tol:.1e}"
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

test_device!(
    strided_input_and_reproducible_runs,
    strided_input_and_reproducible_runs_on
);
fn strided_input_and_reproducible_runs_on(dev: &Device) -> anyhow::Result<()> {
    let _guard = lock();
    let (b, t, h, hd) = (2, 21, 3, 16);
    let d = h * hd;
    // [t, b, 3d] transposed: a non-contiguous view of the same values as `qkv`.
    let qkv_tb = randn(&[t, b, 3 * d], 1.0, 7);
    let qkv = qkv_tb.transpose(0, 1).unwrap().contiguous().unwrap();
    let w = randn(&[b, t, d], 1.0, 8);
    let dev = dev.clone();
    for tf32 in tf32_states(&dev) {
        candle_core::cuda::set_gemm_reduced_precision_f32(tf32);
        let strided = qkv_tb
            .to_dtype(DType::F32)
            .unwrap()
            .to_device(&dev)
            .unwrap()
            .transpose(0, 1)
            .unwrap();
        let y_strided = causal_attention_train(&strided, h).unwrap();
        let (y1, dx1) = ours(&qkv, &w, h, &dev).unwrap();
        let (y2, dx2) = ours(&qkv, &w, h, &dev).unwrap();
        candle_core::cuda::set_gemm_reduced_precision_f32(false);
        let bits = |x: &Tensor| {
            x.flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
                .into_iter()
                .map(f32::to_bits)
                .collect::<Vec<_>>()
        };
        assert_eq!(bits(&y_strided), bits(&y1), "{dev:?}: strided input");
        assert_eq!(bits(&y1), bits(&y2), "{dev:?} tf32={tf32}: two runs differ");
        assert_eq!(
            bits(&dx1),
            bits(&dx2),
            "{dev:?} tf32={tf32}: two backwards differ"
        );
    }
    Ok(())
}

test_device!(
    bad_shapes_and_dtypes_are_clear_errors,
    bad_shapes_and_dtypes_are_clear_errors_on
);
fn bad_shapes_and_dtypes_are_clear_errors_on(dev: &Device) -> anyhow::Result<()> {
    let _guard = lock();
    let dev = dev.clone();
    let x = |dims: &[usize], dtype: DType| Tensor::zeros(dims, dtype, &dev).expect("zeros");
    let cases = [
        (x(&[2, 5, 10], DType::F32), 2, "3 x 2 heads"),
        (x(&[2, 5, 12], DType::F32), 0, "3 x 0 heads"),
        // Zero-size buffers are not allocated on CUDA: these stay on the CPU.
        (
            Tensor::zeros(&[2, 5, 0], DType::F32, &Device::Cpu).expect("zeros"),
            1,
            "last dimension 0",
        ),
        (
            Tensor::zeros(&[0, 5, 12], DType::F32, &Device::Cpu).expect("zeros"),
            2,
            "empty input",
        ),
        (
            Tensor::zeros(&[2, 0, 12], DType::F32, &Device::Cpu).expect("zeros"),
            2,
            "empty input",
        ),
        (x(&[5, 12], DType::F32), 2, "[batch, seq, 3 d]"),
        (x(&[1, 5, 12], DType::BF16), 2, "needs f32"),
    ];
    for (input, n_head, expected) in cases {
        let err = causal_attention_train(&input, n_head)
            .err()
            .unwrap_or_else(|| panic!("{dev:?}: {:?} with {n_head} heads accepted", input.dims()));
        let msg = err.to_string();
        assert!(
            msg.contains("causal_attention_train") && msg.contains(expected),
            "{dev:?}: {:?} with {n_head} heads: unclear error {msg:?}",
            input.dims()
        );
    }
    Ok(())
}
