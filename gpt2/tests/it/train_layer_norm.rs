//! `layer_norm_train` (output and the gradients of input, weight and bias) against a float64
//! reference built from candle's composite ops and backprop on the CPU; one test body for the CPU
//! and, in a CUDA build with a GPU, the GPU. Shapes include one row, no rows, rows of one element,
//! widths that are not multiples of 32 or 128, widths past the CUDA kernels' 2048-column variant,
//! a row with a large mean, a constant row (zero variance) and a row with a variance below eps.
use crate::common;
use gpt2::ops::layer_norm_train;

use candle_core::{DType, Device, Tensor, Var, D};
use common::{max_abs_diff, randn, rel_err};
use runtime::test_device;

/// Output and (dx, dweight, dbias) for the loss sum(y * dy).
struct Run {
    y: Tensor,
    dx: Tensor,
    dw: Tensor,
    db: Tensor,
}

/// Layer norm from candle's composite ops (the centred variance, like the op), in the inputs' dtype.
fn composite(x: &Tensor, w: &Tensor, b: &Tensor, eps: f32) -> Tensor {
    let centred = x
        .broadcast_sub(&x.mean_keepdim(D::Minus1).unwrap())
        .unwrap();
    let var = centred.sqr().unwrap().mean_keepdim(D::Minus1).unwrap();
    centred
        .broadcast_div(&(var + eps as f64).unwrap().sqrt().unwrap())
        .unwrap()
        .broadcast_mul(w)
        .unwrap()
        .broadcast_add(b)
        .unwrap()
}

/// `f` applied `layers` times with the same weight and bias, and the gradients of sum(y * dy).
fn run(
    f: &dyn Fn(&Tensor, &Tensor, &Tensor) -> Tensor,
    x: &Tensor,
    w: &Tensor,
    b: &Tensor,
    dy: &Tensor,
    layers: usize,
) -> Run {
    let [xv, wv, bv] = common::vars([x, w, b]);
    let mut y = xv.as_tensor().clone();
    for _ in 0..layers {
        y = f(&y, wv.as_tensor(), bv.as_tensor());
    }
    let grads = (&y * dy).unwrap().sum_all().unwrap().backward().unwrap();
    let grad = |v: &Var| grads.get(v.as_tensor()).expect("a gradient").clone();
    Run {
        dx: grad(&xv),
        dw: grad(&wv),
        db: grad(&bv),
        y,
    }
}

/// Inputs of one case, drawn in f64 and rounded to `dtype` (the reference sees the rounded values).
struct Case {
    dims: Vec<usize>,
    eps: f32,
    dtype: DType,
    /// Relative tolerance of every output.
    tol: f64,
    /// Layer norms applied in a row (each with its own saved statistics).
    layers: usize,
    /// Rows 0, 1, 2 become: constant, mean 100, standard deviation 1e-2.
    special_rows: bool,
}

impl Case {
    fn new(dims: &[usize]) -> Case {
        Case {
            dims: dims.to_vec(),
            eps: 1e-5,
            dtype: DType::F32,
            tol: 5e-5,
            layers: 1,
            special_rows: false,
        }
    }

    fn inputs(&self, seed: u64) -> [Tensor; 4] {
        let d = *self.dims.last().unwrap();
        let mut x = randn(&self.dims, 1.0, seed);
        if self.special_rows {
            let rows = x.elem_count() / d;
            let flat = x.reshape((rows, d)).unwrap();
            let special = Tensor::cat(
                &[
                    Tensor::full(-1.25f64, (1, d), &Device::Cpu).unwrap(),
                    (flat.narrow(0, 1, 1).unwrap() + 100.0).unwrap(),
                    (flat.narrow(0, 2, 1).unwrap() * 1e-2).unwrap(),
                    flat.narrow(0, 3, rows - 3).unwrap(),
                ],
                0,
            )
            .unwrap();
            x = special.reshape(self.dims.as_slice()).unwrap();
        }
        let w = (randn(&[d], 0.5, seed + 1) + 1.0).unwrap();
        let b = randn(&[d], 0.5, seed + 2);
        let dy = randn(&self.dims, 1.0, seed + 3);
        [x, w, b, dy].map(|t| t.to_dtype(self.dtype).unwrap())
    }

    /// The op on `device` against the float64 reference; returns the four relative errors.
    fn check(&self, device: &Device, seed: u64) -> [f64; 4] {
        let inputs = self.inputs(seed);
        let on_device = inputs
            .clone()
            .map(|t| t.to_device(device).unwrap().contiguous().unwrap());
        let [x, w, b, dy] = &on_device;
        let eps = self.eps;
        let ours = run(
            &|x, w, b| layer_norm_train(x, w, b, eps).unwrap(),
            x,
            w,
            b,
            dy,
            self.layers,
        );
        let [x, w, b, dy] = inputs.map(|t| t.to_dtype(DType::F64).unwrap());
        let reference = run(
            &|x, w, b| composite(x, w, b, eps),
            &x,
            &w,
            &b,
            &dy,
            self.layers,
        );
        assert_eq!(ours.y.dtype(), self.dtype);
        assert_eq!(ours.dx.dtype(), self.dtype);
        let errs = [
            rel_err(&ours.y, &reference.y),
            rel_err(&ours.dx, &reference.dx),
            rel_err(&ours.dw, &reference.dw),
            rel_err(&ours.db, &reference.db),
        ];
        println!(
            "{device:?} {:?} {:?} layers {} special {}: y {:.1e} dx {:.1e} dw {:.1e} db {:.1e}",
            self.dims,
            self.dtype,
            self.layers,
            self.special_rows,
            errs[0],
            errs[1],
            errs[2],
            errs[3]
        );
        for (name, err) in ["y", "dx", "dweight", "dbias"].iter().zip(errs) {
            assert!(
                err <= self.tol,
                "{device:?} {:?} {:?}: {name} relative error {err:.2e} > {:.1e}",
                self.dims,
                self.dtype,
                self.tol
            );
        }
        errs
    }
}

test_device!(
    layer_norm_train_matches_float64_reference,
    layer_norm_train_matches_float64_reference_on
);
fn layer_norm_train_matches_float64_reference_on(device: &Device) -> anyhow::Result<()> {
    let mut cases: Vec<Case> = [
        &[1, 64][..],
        &[5, 37],
        &[7, 200],
        &[3, 4, 1600],
        &[33, 1025],
        &[300, 96],
        &[4, 3000],
        &[3, 1],
    ]
    .iter()
    .map(|dims| Case::new(dims))
    .collect();
    // The mean-100 row also catches the one-pass variance E[x^2] - E[x]^2, off by about 1e-3 there
    // in f32 (the two-pass CUDA kernel measured 3e-6 on an H200).
    cases.push(Case {
        special_rows: true,
        ..Case::new(&[6, 130])
    });
    cases.push(Case {
        eps: 0.1,
        ..Case::new(&[8, 50])
    });
    cases.push(Case {
        layers: 2,
        ..Case::new(&[9, 160])
    });
    cases.push(Case {
        dtype: DType::BF16,
        tol: 1.5e-2,
        ..Case::new(&[64, 200])
    });
    cases.push(Case {
        dtype: DType::F16,
        tol: 2e-3,
        ..Case::new(&[16, 96])
    });
    let device = device.clone();
    for (i, case) in cases.iter().enumerate() {
        case.check(&device, 100 + i as u64);
    }
    Ok(())
}

#[test]
fn layer_norm_train_errors_would_show_a_wrong_formula() {
    // The f32 tolerance sits below the effect of a subtle slip: the unbiased variance at d = 1600
    // (about 3e-4 relative on y).
    let case = Case::new(&[4, 1600]);
    let [x, w, b, _] = case.inputs(7).map(|t| t.to_dtype(DType::F64).unwrap());
    let right = composite(&x, &w, &b, case.eps);
    let d = 1600.0;
    let centred = x
        .broadcast_sub(&x.mean_keepdim(D::Minus1).unwrap())
        .unwrap();
    let unbiased = (centred.sqr().unwrap().sum_keepdim(D::Minus1).unwrap() / (d - 1.0)).unwrap();
    let wrong = centred
        .broadcast_div(&(unbiased + case.eps as f64).unwrap().sqrt().unwrap())
        .unwrap()
        .broadcast_mul(&w)
        .unwrap()
        .broadcast_add(&b)
        .unwrap();
    assert!(rel_err(&wrong, &right) > 2.0 * case.tol);
}

test_device!(
    layer_norm_train_handles_no_rows_and_a_transposed_input,
    layer_norm_train_handles_no_rows_and_a_transposed_input_on
);
fn layer_norm_train_handles_no_rows_and_a_transposed_input_on(
    device: &Device,
) -> anyhow::Result<()> {
    let device = device.clone();
    let w = Var::from_tensor(&Tensor::ones(16, DType::F32, &device).unwrap()).unwrap();
    let b = Var::from_tensor(&Tensor::zeros(16, DType::F32, &device).unwrap()).unwrap();
    // Some drivers refuse zero-byte buffers; then candle has no empty tensors there either.
    match Tensor::zeros((0, 16), DType::F32, &device) {
        Ok(empty) => {
            let x = Var::from_tensor(&empty).unwrap();
            let y = layer_norm_train(x.as_tensor(), w.as_tensor(), b.as_tensor(), 1e-5).unwrap();
            assert_eq!(y.dims(), [0, 16]);
            let grads = y.sum_all().unwrap().backward().unwrap();
            let dw = grads.get(w.as_tensor()).unwrap();
            assert_eq!(dw.dims(), [16]);
            let zeros = Tensor::zeros(16, DType::F32, &device).unwrap();
            assert_eq!(max_abs_diff(dw, &zeros), 0.0);
        }
        Err(e) => println!("{device:?}: no empty tensors ({e}); rows = 0 not checked"),
    }

    // A strided input gives what its contiguous copy gives.
    let xt = randn(&[16, 10], 1.0, 3)
        .to_dtype(DType::F32)
        .unwrap()
        .to_device(&device)
        .unwrap()
        .t()
        .unwrap();
    let (w, b) = (w.as_tensor(), b.as_tensor());
    let strided = layer_norm_train(&xt, w, b, 1e-5).unwrap();
    let copied = layer_norm_train(&xt.contiguous().unwrap(), w, b, 1e-5).unwrap();
    assert_eq!(max_abs_diff(&strided, &copied), 0.0);
    Ok(())
}

test_device!(
    layer_norm_train_gradients_are_reproducible,
    layer_norm_train_gradients_are_reproducible_on
);
fn layer_norm_train_gradients_are_reproducible_on(device: &Device) -> anyhow::Result<()> {
    let device = device.clone();
    let case = Case::new(&[2048, 200]);
    let inputs = case
        .inputs(11)
        .map(|t| t.to_device(&device).unwrap().contiguous().unwrap());
    let [x, w, b, dy] = &inputs;
    let once = || {
        run(
            &|x, w, b| layer_norm_train(x, w, b, case.eps).unwrap(),
            x,
            w,
            b,
            dy,
            1,
        )
    };
    let (a, c) = (once(), once());
    for (p, q) in [(&a.dx, &c.dx), (&a.dw, &c.dw), (&a.db, &c.db)] {
        assert_eq!(max_abs_diff(p, q), 0.0, "{device:?}: gradients differ");
    }
    Ok(())
}

test_device!(
    layer_norm_train_rejects_bad_shapes_with_a_clear_error,
    layer_norm_train_rejects_bad_shapes_with_a_clear_error_on
);
fn layer_norm_train_rejects_bad_shapes_with_a_clear_error_on(
    device: &Device,
) -> anyhow::Result<()> {
    let device = device.clone();
    let t = |dims: &[usize], dtype: DType| Tensor::zeros(dims, dtype, &device).unwrap();
    let f32_ = DType::F32;
    // (why, dims of x, w and b, dtype of w)
    let bad: [(&str, [&[usize]; 3], DType); 5] = [
        ("weight and bias must be [d]", [&[4, 8], &[9], &[8]], f32_),
        (
            "weight and bias must be [d]",
            [&[4, 8], &[8], &[2, 8]],
            f32_,
        ),
        ("at least one dimension", [&[], &[1], &[1]], f32_),
        ("the last dimension is empty", [&[4, 0], &[0], &[0]], f32_),
        ("one dtype", [&[4, 8], &[8], &[8]], DType::F16),
    ];
    for (why, [x, w, b], w_dtype) in bad {
        let (x, w, b) = (t(x, f32_), t(w, w_dtype), t(b, f32_));
        let err = layer_norm_train(&x, &w, &b, 1e-5)
            .expect_err(why)
            .to_string();
        assert!(
            err.contains("layer_norm_train") && err.contains(why),
            "{device:?}: {err}"
        );
    }
    if device.is_cuda() {
        let (x, w) = (t(&[2, 8193], f32_), t(&[8193], f32_));
        let err = layer_norm_train(&x, &w, &w, 1e-5)
            .expect_err("d > 8192")
            .to_string();
        assert!(err.contains("at most 8192"), "{err}");
    }
    Ok(())
}
