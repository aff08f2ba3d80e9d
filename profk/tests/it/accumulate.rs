//! `topk_accumulate`: the residual update is exact (bit for bit, gradients added once, also through a
//! redraw and the fallback) and the selection equals a full f64 sort of |residual + g| with ties by
//! index, on every device.
use crate::common;

use runtime::test_device;

use anyhow::{ensure, Context, Result};
use candle_core::{DType, Device, Tensor};
use common::{check_against_reference, normal, small_ints};
use profk::accumulate::topk_accumulate_with_plan;
use profk::{Accumulation, FlatSpans, NanPolicy, Order, Plan, Selector, TopKOptions};

/// One accumulation problem: per-span residual and gradient values, optionally a velocity and μ.
struct Case {
    lens: Vec<usize>,
    residual: Vec<f32>,
    grads: Vec<f32>,
    velocity: Option<(Vec<f32>, f32)>,
    /// Gradient dtype (f32, or bf16 to exercise the conversion).
    grad_dtype: DType,
    /// Spans passed without a gradient (already in the residual): left as they are.
    absent: Vec<usize>,
}

impl Case {
    fn new(lens: &[usize], residual: Vec<f64>, grads: Vec<f64>) -> Self {
        let cast = |v: Vec<f64>| v.into_iter().map(|x| x as f32).collect();
        Self {
            lens: lens.to_vec(),
            residual: cast(residual),
            grads: cast(grads),
            velocity: None,
            grad_dtype: DType::F32,
            absent: Vec::new(),
        }
    }

    /// Whether each coordinate's span has a gradient to add.
    fn present(&self) -> Vec<bool> {
        self.lens
            .iter()
            .enumerate()
            .flat_map(|(i, &len)| std::iter::repeat_n(!self.absent.contains(&i), len))
            .collect()
    }

    fn n(&self) -> usize {
        self.lens.iter().sum()
    }

    /// The gradient values as the device sees them (rounded through the gradient dtype).
    fn grad_values(&self) -> Result<Vec<f32>> {
        Ok(Tensor::new(self.grads.as_slice(), &Device::Cpu)?
            .to_dtype(self.grad_dtype)?
            .to_dtype(DType::F32)?
            .to_vec1()?)
    }

    /// The expected residual (and velocity) after the update, in f32 with one rounding per operation.
    fn expected(&self) -> Result<(Vec<f32>, Option<Vec<f32>>)> {
        let g = self.grad_values()?;
        match &self.velocity {
            None => Ok((
                self.residual
                    .iter()
                    .zip(&g)
                    .zip(self.present())
                    .map(|((r, g), add)| if add { r + g } else { *r })
                    .collect(),
                None,
            )),
            Some((u, mu)) => {
                let u: Vec<f32> = u.iter().zip(&g).map(|(u, g)| mu.mul_add(*u, *g)).collect();
                let r = self.residual.iter().zip(&u).map(|(r, u)| r + u).collect();
                Ok((r, Some(u)))
            }
        }
    }
}

/// Device state of one run.
struct State {
    spans: FlatSpans,
    residual: Tensor,
    velocity: Option<Tensor>,
    mu: f32,
    grads: Vec<Option<Tensor>>,
}

impl State {
    fn new(c: &Case, dev: &Device) -> Result<Self> {
        let mut grads = Vec::new();
        let mut off = 0;
        for (i, &len) in c.lens.iter().enumerate() {
            let g = Tensor::new(&c.grads[off..off + len], dev)?;
            let g = if len > 0 {
                g.to_dtype(c.grad_dtype)?
            } else {
                g
            };
            // Some gradients are matrices: the spans only count elements.
            let g = if len % 3 == 0 && len > 0 && i % 2 == 0 {
                g.reshape((3, len / 3))?
            } else {
                g
            };
            grads.push((!c.absent.contains(&i)).then_some(g));
            off += len;
        }
        Ok(Self {
            spans: FlatSpans::new(c.lens.iter().copied()),
            residual: Tensor::new(c.residual.as_slice(), dev)?,
            velocity: c
                .velocity
                .as_ref()
                .map(|(u, _)| Tensor::new(u.as_slice(), dev))
                .transpose()?,
            mu: c.velocity.as_ref().map_or(0.0, |(_, mu)| *mu),
            grads,
        })
    }

    fn acc(&self) -> Accumulation<'_> {
        Accumulation {
            residual: &self.residual,
            grads: &self.grads,
            velocity: self.velocity.as_ref(),
            momentum: self.mu,
        }
    }
}

/// The bits of every value, every NaN as one canonical NaN (devices differ in NaN payloads).
fn bits_of(v: &[f32]) -> Vec<u32> {
    v.iter()
        .map(|x| {
            if x.is_nan() {
                f32::NAN.to_bits()
            } else {
                x.to_bits()
            }
        })
        .collect()
}

fn bits(t: &Tensor) -> Result<Vec<u32>> {
    Ok(bits_of(&t.to_device(&Device::Cpu)?.to_vec1::<f32>()?))
}

/// `run` with Prof-K for each k of `profk_ks`, and with the radix selector for `radix_k`.
fn profk_and_radix(c: &Case, profk_ks: [usize; 3], radix_k: usize, dev: &Device) -> Result<()> {
    for k in profk_ks {
        run(c, k, &magnitude(Selector::Profk, Order::Index), None, dev)?;
    }
    run(
        c,
        radix_k,
        &magnitude(Selector::Radix, Order::Index),
        None,
        dev,
    )?;
    Ok(())
}

/// `run` with Prof-K and `plan` in place of the computed parameters.
fn run_planned(c: &Case, k: usize, order: Order, plan: Plan, dev: &Device) -> Result<profk::TopK> {
    run(c, k, &magnitude(Selector::Profk, order), Some(plan), dev)
}

/// Runs the case and checks the updated state bit for bit and the selection against the f64 full
/// sort of the expected accumulation.
fn run(
    c: &Case,
    k: usize,
    opts: &TopKOptions,
    plan: Option<Plan>,
    dev: &Device,
) -> Result<profk::TopK> {
    let s = State::new(c, dev)?;
    let got = match plan {
        None => profk::topk_accumulate(&s.spans, &s.acc(), k, opts)?,
        Some(p) => topk_accumulate_with_plan(&s.spans, &s.acc(), k, opts, p)?,
    };
    let (want_r, want_u) = c.expected()?;
    let what = || format!("n={} k={k} {opts:?} plan={plan:?}", c.n());
    ensure!(
        bits(&s.residual)? == bits_of(&want_r),
        "residual differs: {}",
        what()
    );
    if let (Some(u), Some(want_u)) = (&s.velocity, want_u) {
        ensure!(bits(u)? == bits_of(&want_u), "velocity differs: {}", what());
    }
    let acc = Tensor::new(want_r.as_slice(), dev)?;
    let flat = TopKOptions {
        mode: profk::Mode::Flat,
        ..opts.clone()
    };
    check_against_reference(&acc, k, &flat, &got).with_context(what)?;
    Ok(got)
}

fn magnitude(selector: Selector, order: Order) -> TopKOptions {
    TopKOptions {
        selector,
        order,
        by_magnitude: true,
        ..TopKOptions::default()
    }
}

/// Odd lengths (misaligned spans), an empty span, and more than one chunk per span; n over the
/// sampling threshold.
const ODD: [usize; 11] = [1, 3, 7, 1000, 4097, 13, 0, 65541, 31, 2, 30011];
/// Lengths that keep every span 16-byte aligned (the vectorized pass), several chunks.
const ALIGNED: [usize; 5] = [4096, 131076, 1600, 8, 6400];

fn random_case(lens: &[usize], seed: u64) -> Case {
    let n = lens.iter().sum();
    Case::new(lens, normal(n, seed), normal(n, seed + 1))
}

/// Random values over many spans of odd and aligned sizes, k ∈ {0, 1, small, n−1, n}, every selector.
fn random_spans(dev: &Device) -> Result<()> {
    for (lens, seed) in [(&ODD[..], 1), (&ALIGNED[..], 3)] {
        let c = random_case(lens, seed);
        let n = c.n();
        for k in [0, 1, 17, n / 1000, n - 1, n] {
            for order in [Order::Index, Order::Desc] {
                run(&c, k, &magnitude(Selector::Profk, order), None, dev)?;
            }
        }
        for selector in [Selector::Sort, Selector::Radix, Selector::Select] {
            run(&c, 100, &magnitude(selector, Order::Index), None, dev)?;
        }
        // Ranking by signed value goes through the same pass.
        let signed = TopKOptions {
            by_magnitude: false,
            ..TopKOptions::default()
        };
        run(&c, 50, &signed, None, dev)?;
    }
    Ok(())
}

/// DGC momentum correction: u = μ·u + g (fused multiply-add), residual += u.
fn momentum(dev: &Device) -> Result<()> {
    for (lens, seed) in [(&ODD[..], 5), (&ALIGNED[..], 7)] {
        let mut c = random_case(lens, seed);
        c.velocity = Some((
            normal(c.n(), seed + 2)
                .into_iter()
                .map(|x| x as f32)
                .collect(),
            0.9,
        ));
        profk_and_radix(&c, [1, 150, c.n()], 150, dev)?;
    }
    Ok(())
}

/// Heavy ties (five levels of |acc|), all zeros, all equal, signed zeros: ties go to the lowest index.
fn ties_zeros_equal(dev: &Device) -> Result<()> {
    let n: usize = ODD.iter().sum();
    let levels = |seed| {
        small_ints(n, 5, seed)
            .into_iter()
            .map(|x| x - 2.0)
            .collect::<Vec<_>>()
    };
    let cases = [
        ("five levels", Case::new(&ODD, levels(11), levels(12))),
        ("zeros", Case::new(&ODD, vec![0.0; n], vec![0.0; n])),
        (
            "all equal",
            Case::new(
                &ALIGNED,
                vec![0.5; ALIGNED.iter().sum()],
                vec![0.25; ALIGNED.iter().sum()],
            ),
        ),
        (
            "signed zeros",
            Case::new(
                &ODD,
                vec![-0.0; n],
                (0..n)
                    .map(|i| if i % 3 == 0 { 0.0 } else { -0.0 })
                    .collect(),
            ),
        ),
    ];
    for (name, c) in &cases {
        let n = c.n();
        for k in [1, 100, 5000, n - 1, n] {
            for order in [Order::Index, Order::Desc] {
                run(c, k, &magnitude(Selector::Profk, order), None, dev).with_context(|| *name)?;
            }
        }
    }
    Ok(())
}

/// A NaN in the accumulation is an error naming it (the residual is updated all the same); with
/// `nan = largest` it ranks above +inf. ±inf rank by magnitude.
fn nan_and_inf(dev: &Device) -> Result<()> {
    let n: usize = ODD.iter().sum();
    let mut r = normal(n, 21);
    let mut g = normal(n, 22);
    r[5] = f64::INFINITY;
    g[70_000] = f64::NEG_INFINITY;
    g[40_000] = f64::NAN;
    g[90_000] = f64::NAN;
    let c = Case::new(&ODD, r, g);
    let s = State::new(&c, dev)?;
    match profk::topk_accumulate(
        &s.spans,
        &s.acc(),
        10,
        &magnitude(Selector::Profk, Order::Index),
    ) {
        Err(profk::Error::NaN { count, first }) => {
            ensure!((count, first) == (2, 40_000), "{count} NaN, first {first}")
        }
        other => anyhow::bail!("expected a NaN error, got {other:?}"),
    }
    ensure!(
        bits(&s.residual)? == bits_of(&c.expected()?.0),
        "residual after the NaN error"
    );
    let largest = TopKOptions {
        nan: NanPolicy::Largest,
        ..magnitude(Selector::Profk, Order::Desc)
    };
    let got = run(&c, 4, &largest, None, dev)?;
    let idx: Vec<i64> = got.indices.to_device(&Device::Cpu)?.to_vec1()?;
    ensure!(idx == vec![40_000, 90_000, 5, 70_000], "{idx:?}");
    Ok(())
}

/// Plans that fail every attempt: the redraw and the fallback read the updated residual, so the
/// gradients are added exactly once and the answer stays exact.
fn forced_fallback(dev: &Device) -> Result<()> {
    for velocity in [false, true] {
        let mut c = random_case(&ODD, 31);
        if velocity {
            c.velocity = Some((vec![0.5; c.n()], 0.5));
        }
        let k = 300;
        let plans = [
            // Buffer smaller than k: every attempt overflows.
            Plan {
                sample: 256,
                t: 8,
                capacity: 100,
            },
            // Threshold at the sample's maximum: too few candidates every time.
            Plan {
                sample: 4096,
                t: 1,
                capacity: 5000,
            },
        ];
        for plan in plans {
            let got = run_planned(&c, k, Order::Index, plan, dev)?;
            ensure!(
                got.stats.fell_back,
                "{plan:?} should fall back: {:?}",
                got.stats
            );
        }
    }
    Ok(())
}

/// Samples too large to be selected inside one block take the written-out sample and the
/// multi-launch threshold selection; with and without momentum.
fn large_sample(dev: &Device) -> Result<()> {
    for velocity in [false, true] {
        let mut c = random_case(&ALIGNED, 61);
        if velocity {
            c.velocity = Some((
                normal(c.n(), 62).into_iter().map(|x| x as f32).collect(),
                0.9,
            ));
        }
        let k = 500;
        let plan: Plan = profk::params::exact(c.n() as u64, k as u64, 1e-3, Some(1 << 15))?.into();
        let got = run_planned(&c, k, Order::Desc, plan, dev)?;
        ensure!(got.stats.sample == 1 << 15, "{:?}", got.stats);
    }
    Ok(())
}

/// Bad input gets an error naming what is wrong, before anything is written.
fn bad_input(dev: &Device) -> Result<()> {
    let c = random_case(&[3, 4], 41);
    let s = State::new(&c, dev)?;
    let opts = magnitude(Selector::Profk, Order::Index);
    let err = profk::topk_accumulate(&s.spans, &s.acc(), 8, &opts).unwrap_err();
    ensure!(
        matches!(err, profk::Error::KTooLarge { k: 8, n: 7 }),
        "{err}"
    );
    let short = Accumulation {
        grads: &s.grads[..1],
        ..s.acc()
    };
    let err = profk::topk_accumulate(&s.spans, &short, 1, &opts)
        .unwrap_err()
        .to_string();
    ensure!(err.contains("1 gradients for 2 spans"), "{err}");
    let swapped = [s.grads[1].clone(), s.grads[0].clone()];
    let swapped = Accumulation {
        grads: &swapped,
        ..s.acc()
    };
    refuses(&s, &c, &swapped, "gradient 0 has 4 elements, its span 3")?;
    let half = s.residual.to_dtype(DType::F16)?;
    let half = Accumulation {
        residual: &half,
        ..s.acc()
    };
    refuses(&s, &c, &half, "residual must be f32")
}

/// `accumulate` refuses `acc` with an error that says `wanted`, and leaves the residual as it was.
fn refuses(s: &State, c: &Case, acc: &Accumulation, wanted: &str) -> Result<()> {
    let err = profk::accumulate(&s.spans, acc).unwrap_err().to_string();
    ensure!(err.contains(wanted), "{err}");
    ensure!(
        bits(&s.residual)? == bits_of(&c.residual),
        "bad input changed the residual"
    );
    Ok(())
}

/// Spans passed without a gradient (their residual already holds it) are read, not written: the
/// plain update, the fused selection over odd and aligned spans, and the redraw and fallback.
fn absent_gradients(dev: &Device) -> Result<()> {
    for (lens, seed, absent) in [
        (&ODD[..], 61, vec![0, 3, 5, 7]),
        (&ALIGNED[..], 63, vec![1, 4]),
        (&ALIGNED[..], 65, (0..ALIGNED.len()).collect()),
    ] {
        let mut c = random_case(lens, seed);
        c.absent = absent;
        let s = State::new(&c, dev)?;
        profk::accumulate(&s.spans, &s.acc())?;
        ensure!(
            bits(&s.residual)? == bits_of(&c.expected()?.0),
            "plain update with absent spans differs"
        );
        let n = c.n();
        profk_and_radix(&c, [1, n / 1000, n], 100, dev)?;
        let always_fails = Plan {
            sample: 256,
            t: 8,
            capacity: 100,
        };
        let got = run_planned(&c, 300, Order::Index, always_fails, dev)?;
        ensure!(got.stats.fell_back, "should fall back: {:?}", got.stats);
    }
    // Momentum correction updates every span's velocity: a missing gradient is an error.
    let mut c = random_case(&[3, 4], 67);
    c.velocity = Some((vec![0.5; 7], 0.9));
    c.absent = vec![1];
    let s = State::new(&c, dev)?;
    refuses(&s, &c, &s.acc(), "momentum correction needs every")
}

/// The plain update (no selection), and bf16 gradients converted on the way in.
fn plain_update(dev: &Device) -> Result<()> {
    let mut c = random_case(&ODD, 51);
    c.grad_dtype = DType::BF16;
    let s = State::new(&c, dev)?;
    profk::accumulate(&s.spans, &s.acc())?;
    ensure!(
        bits(&s.residual)? == bits_of(&c.expected()?.0),
        "plain update differs"
    );
    run(&c, 64, &magnitude(Selector::Profk, Order::Desc), None, dev)?;
    Ok(())
}

test_device!(random_spans, random_spans);
test_device!(momentum, momentum);
test_device!(ties_zeros_equal, ties_zeros_equal);
test_device!(nan_and_inf, nan_and_inf);
test_device!(forced_fallback, forced_fallback);
test_device!(large_sample, large_sample);
test_device!(bad_input, bad_input);
test_device!(plain_update, plain_update);
test_device!(absent_gradients, absent_gradients);
