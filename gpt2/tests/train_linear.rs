//! `linear_train` (x W + b, optionally GELU, with gradients for x, W and b) against float64
//! references from candle's composed ops and backprop on the CPU: one test body for every device.
//! Shapes include one row, 3-D inputs, row counts past the 64-row chunks of the CUDA bias-gradient
//! kernel, and output widths that are not multiples of 4, 8 or 16 (the CUDA forward then takes its
//! elementwise GELU path instead of cuBLASLt's auxiliary-output epilogue). On CUDA, f32 runs with
//! TF32 products off and on. Inputs that track no gradient take the forward-only path, checked too.
use gpt2::ops::{linear_train, Activation};
mod common;

use candle_core::{DType, Device, Tensor, Var};
use common::{gelu_tanh, randn, rel_err};
use runtime::test_device;

/// Output and gradients (x, W, b) of `sum(act(x W + b) * dy)`.
struct Outcome {
    y: Tensor,
    dx: Tensor,
    dw: Tensor,
    db: Tensor,
}

fn run(
    x: &Tensor,
    w: &Tensor,
    b: &Tensor,
    dy: &Tensor,
    activation: Activation,
    composed: bool,
) -> Outcome {
    let [xv, wv, bv] = common::vars([x, w, b]);
    let y = if composed {
        let d_in = x.dims()[x.rank() - 1];
        let mut out_dims = x.dims().to_vec();
        *out_dims.last_mut().unwrap() = w.dim(1).unwrap();
        let z = xv
            .reshape(((), d_in))
            .unwrap()
            .matmul(wv.as_tensor())
            .unwrap()
            .broadcast_add(bv.as_tensor())
            .unwrap();
        let y = match activation {
            Activation::Identity => z,
            Activation::Gelu => gelu_tanh(&z),
        };
        y.reshape(out_dims).unwrap()
    } else {
        linear_train(&xv, &wv, &bv, activation).unwrap()
    };
    let grads = (&y * dy).unwrap().sum_all().unwrap().backward().unwrap();
    let grad = |v: &Var| grads.get(v).expect("a gradient").clone();
    Outcome {
        dx: grad(&xv),
        dw: grad(&wv),
        db: grad(&bv),
        y,
    }
}

test_device!(
    linear_train_matches_float64_reference,
    linear_train_matches_float64_reference_on
);
fn linear_train_matches_float64_reference_on(device: &Device) -> anyhow::Result<()> {
    // (input dims, d_out): one row, 3-D, > 64 rows, odd and 50257-like widths, multiples of 8.
    let cases: [(&[usize], usize); 8] = [
        (&[1, 7], 5),
        (&[1, 1, 16], 8),
        (&[3, 5, 24], 50),
        (&[2, 33, 64], 64),
        (&[130, 40], 257),
        (&[17, 32], 1027),
        (&[4, 64, 128], 384),
        (&[2, 100, 48], 200),
    ];
    let device = device.clone();
    let mut modes = vec![(DType::F32, false)];
    if device.is_cpu() {
        modes.push((DType::F64, false));
    } else {
        modes.extend([
            (DType::F32, true),
            (DType::BF16, false),
            (DType::F16, false),
        ]);
    }
    for (dtype, tf32) in modes {
        candle_core::cuda::set_gemm_reduced_precision_f32(tf32);
        let tolerance = match (dtype, tf32) {
            (DType::F64, _) => 1e-12,
            (DType::F32, false) => 2e-5,
            (DType::F32, true) => 5e-3,
            (DType::F16, _) => 5e-3,
            _ => 3e-2,
        };
        for (i, &(x_dims, d_out)) in cases.iter().enumerate() {
            let d_in = x_dims[x_dims.len() - 1];
            let mut y_dims = x_dims.to_vec();
            *y_dims.last_mut().unwrap() = d_out;
            let seed = 10 * i as u64;
            // GPT-2-like scales; the bias spreads pre-activations over GELU's curved part.
            let inputs = [
                randn(x_dims, 1.0, seed),
                randn(&[d_in, d_out], 1.0 / (d_in as f64).sqrt(), seed + 1),
                randn(&[d_out], 0.5, seed + 2),
                randn(&y_dims, 1.0, seed + 3),
            ];
            // Both sides start from the values the op sees (rounded to `dtype`).
            let on_device: Vec<Tensor> = inputs
                .iter()
                .map(|t| t.to_dtype(dtype).unwrap().to_device(&device).unwrap())
                .collect();
            let exact: Vec<Tensor> = on_device
                .iter()
                .map(|t| {
                    t.to_device(&Device::Cpu)
                        .unwrap()
                        .to_dtype(DType::F64)
                        .unwrap()
                })
                .collect();
            for activation in [Activation::Identity, Activation::Gelu] {
                let got = run(
                    &on_device[0],
                    &on_device[1],
                    &on_device[2],
                    &on_device[3],
                    activation,
                    false,
                );
                let want = run(&exact[0], &exact[1], &exact[2], &exact[3], activation, true);
                // Without tensors to differentiate, the forward-only path computes the same.
                let untracked =
                    linear_train(&on_device[0], &on_device[1], &on_device[2], activation).unwrap();
                let err = rel_err(&untracked, &want.y);
                assert!(
                    err <= tolerance,
                    "{device:?} {dtype:?} tf32={tf32} {activation:?} x {x_dims:?} d_out \
                     {d_out}: untracked output relative error {err:e} > {tolerance:e}"
                );
                assert_eq!(got.y.dims(), y_dims.as_slice());
                assert_eq!(got.y.dtype(), dtype);
                for (what, g, w) in [
                    ("output", &got.y, &want.y),
                    ("dx", &got.dx, &want.dx),
                    ("dW", &got.dw, &want.dw),
                    ("db", &got.db, &want.db),
                ] {
                    assert_eq!(g.dims(), w.dims(), "{what}");
                    let err = rel_err(g, w);
                    assert!(
                        err <= tolerance,
                        "{device:?} {dtype:?} tf32={tf32} {activation:?} x {x_dims:?} \
                         d_out {d_out}: {what} relative error {err:e} > {tolerance:e}"
                    );
                }
            }
        }
    }
    candle_core::cuda::set_gemm_reduced_precision_f32(false);
    Ok(())
}

test_device!(
    linear_train_rejects_bad_shapes,
    linear_train_rejects_bad_shapes_on
);
fn linear_train_rejects_bad_shapes_on(device: &Device) -> anyhow::Result<()> {
    let device = device.clone();
    let t = |dims: &[usize]| Tensor::zeros(dims, DType::F32, &device).unwrap();
    let cases = [
        (
            t(&[4, 8]),
            t(&[7, 3]),
            t(&[3]),
            "weight rows differ from d_in",
        ),
        (
            t(&[4, 8]),
            t(&[8, 3]),
            t(&[4]),
            "bias length differs from d_out",
        ),
        (t(&[4, 8]), t(&[8]), t(&[8]), "weight not 2-D"),
        (t(&[]), t(&[1, 3]), t(&[3]), "scalar input"),
        (t(&[4, 8]), t(&[8, 3]), t(&[1, 3]), "bias not 1-D"),
    ];
    for (x, w, b, what) in cases {
        for activation in [Activation::Identity, Activation::Gelu] {
            let err = linear_train(&x, &w, &b, activation)
                .err()
                .unwrap_or_else(|| panic!("{what}: accepted"));
            assert!(
                err.to_string().contains("linear_train"),
                "{what}: unclear error {err}"
            );
        }
    }
    let x16 = t(&[4, 8]).to_dtype(DType::F16).unwrap();
    let err = linear_train(&x16, &t(&[8, 3]), &t(&[3]), Activation::Gelu).unwrap_err();
    assert!(err.to_string().contains("dtypes"), "{err}");
    Ok(())
}

// With a gradient sink, the weight's gradient is added into its slice of the buffer (the rest of
// the buffer untouched), the weight gets no gradient, and x and b get the same gradients as without;
// the sink is gone with its guard. f32, TF32 off (the sink's slice is compared to 1e-5 relative).
test_device!(
    gradient_sink_adds_the_weight_gradient_in_place,
    gradient_sink_adds_the_weight_gradient_in_place_on
);
fn gradient_sink_adds_the_weight_gradient_in_place_on(device: &Device) -> anyhow::Result<()> {
    use gpt2::ops::{sink_gradients, GradSink};
    let device = device.clone();
    #[cfg(feature = "cuda")]
    candle_core::cuda::set_gemm_reduced_precision_f32(false);
    let (n, d_in, d_out, offset) = (70, 24, 40, 5);
    let r = |shape: &[usize], seed| {
        let t = randn(shape, 1.0, seed).to_dtype(DType::F32).unwrap();
        t.to_device(&device).unwrap()
    };
    let x = r(&[n, d_in], 1);
    let w = r(&[d_in, d_out], 2);
    let b = r(&[d_out], 3);
    let dy = r(&[n, d_out], 4);
    let start = r(&[d_in * d_out + 9], 5);
    for activation in [Activation::Identity, Activation::Gelu] {
        let plain = run(&x, &w, &b, &dy, activation, false);
        let buffer = start.copy().unwrap();
        let [xv, wv, bv] = common::vars([&x, &w, &b]);
        let y = linear_train(&xv, &wv, &bv, activation).unwrap();
        let loss = (&y * &dy).unwrap().sum_all().unwrap();
        let grads = {
            let sink = GradSink {
                buffer: buffer.clone(),
                offset,
            };
            let _guard = sink_gradients([(wv.as_tensor(), sink)]).unwrap();
            loss.backward().unwrap()
        };
        assert!(grads.get(&wv).is_none(), "{device:?}: W got a gradient");
        for (got, want, what) in [
            (grads.get(&xv).unwrap(), &plain.dx, "dx"),
            (grads.get(&bv).unwrap(), &plain.db, "db"),
        ] {
            assert!(
                rel_err(got, want) < 1e-6,
                "{device:?} {activation:?}: {what}"
            );
        }
        let host = |t: &Tensor| t.to_device(&Device::Cpu).unwrap().to_vec1::<f32>().unwrap();
        let (got, before) = (host(&buffer), host(&start));
        let dw = host(&plain.dw.flatten_all().unwrap());
        let len = d_in * d_out;
        assert_eq!(
            got[..offset],
            before[..offset],
            "{device:?}: before the slice"
        );
        assert_eq!(
            got[offset + len..],
            before[offset + len..],
            "{device:?}: after it"
        );
        let want: Vec<f32> = (0..len).map(|i| before[offset + i] + dw[i]).collect();
        let got_t = Tensor::new(&got[offset..offset + len], &Device::Cpu).unwrap();
        let want_t = Tensor::new(want.as_slice(), &Device::Cpu).unwrap();
        assert!(
            rel_err(&got_t, &want_t) < 1e-5,
            "{device:?} {activation:?}: the sink's slice"
        );
        // The guard is gone: the next backward returns W's gradient.
        let loss = (linear_train(&xv, &wv, &bv, activation).unwrap() * &dy)
            .unwrap()
            .sum_all()
            .unwrap();
        assert!(loss.backward().unwrap().get(&wv).is_some(), "{device:?}");
    }
    Ok(())
}

#[test]
fn gradient_sink_rejects_a_bad_target() {
    use gpt2::ops::{sink_gradients, GradSink};
    let w = Tensor::zeros((4, 3), DType::F32, &Device::Cpu).unwrap();
    let cases = [
        (
            Tensor::zeros(11, DType::F32, &Device::Cpu).unwrap(),
            0,
            "pass the buffer's end",
        ),
        (
            Tensor::zeros(20, DType::F32, &Device::Cpu).unwrap(),
            9,
            "pass the buffer's end",
        ),
        (
            Tensor::zeros((4, 5), DType::F32, &Device::Cpu).unwrap(),
            0,
            "expected one vector",
        ),
        (
            Tensor::zeros(20, DType::BF16, &Device::Cpu).unwrap(),
            0,
            "must both be f32",
        ),
    ];
    for (buffer, offset, want) in cases {
        let err = sink_gradients([(&w, GradSink { buffer, offset })])
            .err()
            .expect("accepted a bad sink")
            .to_string();
        assert!(err.contains(want), "{err}");
    }
}
