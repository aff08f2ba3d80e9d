//! Helpers shared by the op tests: the devices to run on, seeded inputs, error measures.
#![allow(dead_code)]
use candle_core::{DType, Device, Tensor, Var};

/// The CPU, and on a CUDA build GPU 0: a CUDA build without a GPU fails here rather than testing
/// the CPU alone.
pub fn devices() -> Vec<Device> {
    let mut v = vec![Device::Cpu];
    if cfg!(feature = "cuda") {
        v.push(Device::new_cuda(0).expect("a CUDA build tests on GPU 0, which did not open"));
    }
    v
}

/// `t` on the CPU in f64.
pub fn host_f64(t: &Tensor) -> Tensor {
    t.to_device(&Device::Cpu)
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap()
}

/// Largest |a - b| (both moved to the CPU as f64).
pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.dims(), b.dims());
    let d = (host_f64(a) - host_f64(b))
        .unwrap()
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap();
    let v = d.to_vec1::<f64>().unwrap();
    assert!(v.iter().all(|x| x.is_finite()), "non-finite output");
    v.into_iter().fold(0.0, f64::max)
}

pub fn randn(shape: &[usize], std: f64, seed: u64) -> Tensor {
    // Deterministic on every device: drawn on the CPU from a seeded generator.
    let n: usize = shape.iter().product();
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut uniform = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    let v: Vec<f64> = (0..n)
        .map(|_| {
            let (u1, u2) = (uniform(), uniform());
            (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos() * std
        })
        .collect();
    Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
}

/// A trainable copy of each tensor.
pub fn vars<const N: usize>(tensors: [&Tensor; N]) -> [Var; N] {
    tensors.map(|t| Var::from_tensor(t).unwrap())
}

/// Largest |t| (moved to the CPU as f64).
pub fn max_abs(t: &Tensor) -> f64 {
    host_f64(t)
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f64>()
        .unwrap()
}

/// Largest |ours - reference| over the reference's largest magnitude.
pub fn rel_err(ours: &Tensor, reference: &Tensor) -> f64 {
    max_abs_diff(ours, reference) / max_abs(reference).max(1e-30)
}

/// GELU (tanh form) from elementary ops, whose backprop is exact (candle's `gelu` backward
/// rounds its constants to six digits).
pub fn gelu_tanh(z: &Tensor) -> Tensor {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    let inner = ((z + (z.powf(3.0).unwrap() * 0.044715).unwrap()).unwrap() * c).unwrap();
    ((z * 0.5).unwrap() * (inner.tanh().unwrap() + 1.0).unwrap()).unwrap()
}
