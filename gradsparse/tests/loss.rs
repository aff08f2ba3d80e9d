//! The fused CPU next-token loss against the composed candle loss: value and gradient.
use activations::gpt2::Gpt2;
use candle_core::{DType, Device, Tensor, Var};
use gradsparse::loss::next_token_loss;

fn logits_and_tokens(b: usize, t: usize, v: usize, scale: f64, seed: u64) -> (Tensor, Tensor) {
    let dev = Device::Cpu;
    let logits = (Tensor::randn(0f32, 1.0, (b, t, v), &dev).unwrap() * scale).unwrap();
    let tokens: Vec<u32> = (0..b * t)
        .map(|i| ((i as u64 * 2654435761 + seed) % v as u64) as u32)
        .collect();
    (logits, Tensor::from_vec(tokens, (b, t), &dev).unwrap())
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

fn check(b: usize, t: usize, v: usize, scale: f64) {
    let (logits, tokens) = logits_and_tokens(b, t, v, scale, 7);
    let var = Var::from_tensor(&logits).unwrap();
    let fused = next_token_loss(var.as_tensor(), &tokens).unwrap();
    let reference = Gpt2::next_token_loss(var.as_tensor(), &tokens).unwrap();
    let (f, r) = (
        fused.to_scalar::<f32>().unwrap(),
        reference.to_scalar::<f32>().unwrap(),
    );
    assert!(
        (f - r).abs() <= 1e-5 * r.abs().max(1.0),
        "loss {f} vs {r} ({b}x{t}x{v}, scale {scale})"
    );
    // Scale the loss so the backward sees an upstream gradient other than 1.
    let g_fused = (fused * 3.0).unwrap().backward().unwrap();
    let g_ref = (reference * 3.0).unwrap().backward().unwrap();
    let (g_fused, g_ref) = (g_fused.get(&var).unwrap(), g_ref.get(&var).unwrap());
    let diff = max_abs_diff(g_fused, g_ref);
    let largest = g_ref
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    assert!(
        diff <= 1e-5 * largest,
        "gradient differs by {diff} (largest {largest}; {b}x{t}x{v})"
    );
    // The last position predicts nothing.
    let last = g_fused.narrow(1, t - 1, 1).unwrap().abs().unwrap();
    assert_eq!(last.sum_all().unwrap().to_scalar::<f32>().unwrap(), 0.0);
}

#[test]
fn matches_the_composed_loss_and_gradient() {
    check(2, 5, 1000, 1.0);
    check(3, 4, 17, 30.0); // large logits: the max subtraction matters
    check(1, 2, 50257, 5.0); // the GPT-2 vocabulary, one predicting row
}

#[test]
fn non_contiguous_logits_are_accepted() {
    let (logits, tokens) = logits_and_tokens(2, 6, 50, 2.0, 3);
    let transposed = logits.transpose(0, 1).unwrap().contiguous().unwrap();
    let strided = transposed.transpose(0, 1).unwrap();
    assert!(!strided.is_contiguous());
    let a = next_token_loss(&strided, &tokens).unwrap();
    let b = Gpt2::next_token_loss(&logits, &tokens).unwrap();
    let (a, b) = (a.to_scalar::<f32>().unwrap(), b.to_scalar::<f32>().unwrap());
    assert!((a - b).abs() < 1e-5, "{a} vs {b}");
}

#[test]
fn bad_values_and_shapes_are_reported() {
    let dev = Device::Cpu;
    let (logits, _) = logits_and_tokens(1, 3, 10, 1.0, 1);
    let out_of_vocab = Tensor::from_vec(vec![1u32, 10, 2], (1, 3), &dev).unwrap();
    let loss = next_token_loss(&logits, &out_of_vocab).unwrap();
    assert!(loss.to_scalar::<f32>().unwrap().is_nan());

    let mut values = vec![0f32; 30];
    values[4] = f32::NAN;
    let with_nan = Tensor::from_vec(values, (1, 3, 10), &dev).unwrap();
    let tokens = Tensor::from_vec(vec![1u32, 2, 3], (1, 3), &dev).unwrap();
    let loss = next_token_loss(&with_nan, &tokens).unwrap();
    assert!(loss.to_scalar::<f32>().unwrap().is_nan());

    let short = Tensor::from_vec(vec![1u32, 2], (1, 2), &dev).unwrap();
    let err = next_token_loss(&logits, &short).unwrap_err().to_string();
    assert!(err.contains("shapes"), "{err}");

    // Other dtypes take the composed path and agree.
    let (l, t) = logits_and_tokens(2, 4, 30, 1.0, 5);
    let a = next_token_loss(&l.to_dtype(DType::F64).unwrap(), &t).unwrap();
    let b = next_token_loss(&l, &t).unwrap();
    let diff = (a.to_dtype(DType::F32).unwrap().to_scalar::<f32>().unwrap()
        - b.to_scalar::<f32>().unwrap())
    .abs();
    assert!(diff < 1e-5);
}
