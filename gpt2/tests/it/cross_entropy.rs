//! The fused next-token loss against a float64 loss composed from candle ops: value and gradient,
//! on the CPU and, in a CUDA build with a GPU, on the GPU.
use crate::common;

use candle_core::{DType, Device, Tensor, Var, D};
use common::{max_abs, max_abs_diff, randn};
use gpt2::ops::next_token_cross_entropy;
use runtime::test_device;

fn tokens(b: usize, t: usize, v: usize, seed: u64) -> Tensor {
    let ids: Vec<u32> = (0..b * t)
        .map(|i| ((i as u64 * 2654435761 + seed) % v as u64) as u32)
        .collect();
    Tensor::from_vec(ids, (b, t), &Device::Cpu).unwrap()
}

/// The loss in f64 from composite ops, and its gradient (scaled by `upstream`), on the CPU.
fn reference(logits: &Tensor, tokens: &Tensor, upstream: f64) -> (f64, Tensor) {
    let (b, t, v) = logits.dims3().unwrap();
    let var = Var::from_tensor(&logits.to_dtype(DType::F64).unwrap()).unwrap();
    let pred = var
        .as_tensor()
        .narrow(1, 0, t - 1)
        .unwrap()
        .reshape((b * (t - 1), v))
        .unwrap();
    let target = tokens.narrow(1, 1, t - 1).unwrap().flatten_all().unwrap();
    let logp = candle_nn::ops::log_softmax(&pred, D::Minus1).unwrap();
    let picked = logp
        .gather(&target.unsqueeze(1).unwrap(), 1)
        .unwrap()
        .sum_all()
        .unwrap();
    let loss = (picked * (-1.0 / (b * (t - 1)) as f64)).unwrap();
    let grads = (&loss * upstream).unwrap().backward().unwrap();
    let grad = grads.get(var.as_tensor()).unwrap().clone();
    (loss.to_scalar::<f64>().unwrap(), grad)
}

test_device!(
    matches_float64_reference_value_and_gradient,
    matches_float64_reference_value_and_gradient_on
);
fn matches_float64_reference_value_and_gradient_on(device: &Device) -> anyhow::Result<()> {
    // (batch, positions, vocabulary, logit scale): one predicting row of the GPT-2 vocabulary,
    // large logits (the max subtraction matters), a vocabulary below one block's width.
    let cases = [
        (2, 5, 1000, 1.0),
        (3, 4, 17, 30.0),
        (1, 2, 50257, 5.0),
        (2, 9, 4099, 3.0),
    ];
    let device = device.clone();
    for (i, &(b, t, v, scale)) in cases.iter().enumerate() {
        let logits = randn(&[b, t, v], scale, i as u64)
            .to_dtype(DType::F32)
            .unwrap();
        let tok = tokens(b, t, v, i as u64 + 7);
        let (want, want_grad) = reference(&logits, &tok, 3.0);
        let var = Var::from_tensor(&logits.to_device(&device).unwrap()).unwrap();
        let loss =
            next_token_cross_entropy(var.as_tensor(), &tok.to_device(&device).unwrap()).unwrap();
        let got = loss.to_scalar::<f32>().unwrap() as f64;
        assert!(
            (got - want).abs() <= 2e-6 * want.abs().max(1.0),
            "{device:?} {b}x{t}x{v} scale {scale}: loss {got} vs {want}"
        );
        let grads = (loss * 3.0).unwrap().backward().unwrap();
        let grad = grads.get(var.as_tensor()).unwrap();
        let largest = max_abs(&want_grad);
        let err = max_abs_diff(grad, &want_grad);
        assert!(
            err <= 1e-5 * largest,
            "{device:?} {b}x{t}x{v}: gradient error {err} (largest {largest})"
        );
        // The last position predicts nothing.
        let last = grad.narrow(1, t - 1, 1).unwrap().abs().unwrap();
        let last = last.sum_all().unwrap().to_scalar::<f32>().unwrap();
        assert_eq!(last, 0.0, "{device:?}: gradient at the last position");
    }
    Ok(())
}

test_device!(
    non_contiguous_and_other_dtypes_are_accepted,
    non_contiguous_and_other_dtypes_are_accepted_on
);
fn non_contiguous_and_other_dtypes_are_accepted_on(device: &Device) -> anyhow::Result<()> {
    let device = device.clone();
    let logits = randn(&[2, 6, 50], 2.0, 3)
        .to_dtype(DType::F32)
        .unwrap()
        .to_device(&device)
        .unwrap();
    let tok = tokens(2, 6, 50, 3).to_device(&device).unwrap();
    let want = next_token_cross_entropy(&logits, &tok)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    let strided = logits
        .transpose(0, 1)
        .unwrap()
        .contiguous()
        .unwrap()
        .transpose(0, 1)
        .unwrap();
    assert!(!strided.is_contiguous());
    let a = next_token_cross_entropy(&strided, &tok).unwrap();
    assert_eq!(a.to_scalar::<f32>().unwrap(), want, "{device:?}");
    // Other dtypes are computed in f32.
    let b = next_token_cross_entropy(&logits.to_dtype(DType::BF16).unwrap(), &tok).unwrap();
    let b = b.to_scalar::<f32>().unwrap();
    assert!((b - want).abs() < 2e-2, "{device:?}: bf16 {b} vs {want}");
    Ok(())
}

test_device!(
    bad_values_and_shapes_are_reported,
    bad_values_and_shapes_are_reported_on
);
fn bad_values_and_shapes_are_reported_on(device: &Device) -> anyhow::Result<()> {
    let device = device.clone();
    let at = |v: Vec<f32>, shape: (usize, usize, usize)| {
        Tensor::from_vec(v, shape, &Device::Cpu)
            .unwrap()
            .to_device(&device)
            .unwrap()
    };
    let ids = |v: Vec<u32>, shape: (usize, usize)| {
        Tensor::from_vec(v, shape, &Device::Cpu)
            .unwrap()
            .to_device(&device)
            .unwrap()
    };
    let logits = at(vec![0.5; 30], (1, 3, 10));
    let out_of_vocab = ids(vec![1, 10, 2], (1, 3));
    let loss = next_token_cross_entropy(&logits, &out_of_vocab).unwrap();
    assert!(loss.to_scalar::<f32>().unwrap().is_nan(), "{device:?}");

    for bad in [f32::NAN, f32::INFINITY] {
        let mut values = vec![0f32; 30];
        values[4] = bad;
        let loss =
            next_token_cross_entropy(&at(values, (1, 3, 10)), &ids(vec![1, 2, 3], (1, 3))).unwrap();
        assert!(
            loss.to_scalar::<f32>().unwrap().is_nan(),
            "{device:?} {bad}"
        );
    }
    // -inf logits are fine where the target is finite.
    let mut values = vec![0f32; 30];
    values[4] = f32::NEG_INFINITY;
    let loss = next_token_cross_entropy(&at(values, (1, 3, 10)), &ids(vec![1, 2, 3], (1, 3)))
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    assert!(loss.is_finite(), "{device:?}: {loss}");

    let err = next_token_cross_entropy(&logits, &ids(vec![1, 2], (1, 2)))
        .unwrap_err()
        .to_string();
    assert!(err.contains("shapes"), "{device:?}: {err}");
    Ok(())
}
