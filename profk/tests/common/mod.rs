//! One body of selection tests for every device: each `pub fn name(dev: &Device)` below runs through
//! `runtime::test_device!`, which makes a `name::cpu` test and, with the `cuda` feature, a `name::cuda` test.
//! The reference is a full sort in f64 of the tensor's own values, written independently of the
//! selector.
#![allow(dead_code)]

use anyhow::{ensure, Context, Result};
use candle_core::{DType, Device, Tensor};
use profk::{Mode, NanPolicy, Order, Selector, TopKOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The dtypes a device supports (f64 on CPU only).
pub fn dtypes(dev: &Device) -> Vec<DType> {
    let mut d = vec![DType::F32, DType::BF16, DType::F16];
    if dev.is_cpu() {
        d.push(DType::F64);
    }
    d
}

/// Every selector and order, in the default NaN policy, without magnitude ranking.
pub fn option_grid() -> Vec<TopKOptions> {
    let mut grid = Vec::new();
    for selector in [
        Selector::Profk,
        Selector::Sort,
        Selector::Select,
        Selector::Radix,
    ] {
        for order in [Order::Desc, Order::Index] {
            grid.push(TopKOptions {
                selector,
                order,
                ..TopKOptions::default()
            });
        }
    }
    grid
}

/// A tensor of `dtype` on `dev` holding `values` (rounded to the dtype) in `shape`.
pub fn tensor(values: &[f64], shape: &[usize], dtype: DType, dev: &Device) -> Result<Tensor> {
    Ok(Tensor::from_vec(values.to_vec(), shape, &Device::Cpu)?
        .to_dtype(dtype)?
        .to_device(dev)?)
}

/// The reference ranking: a stable sort of the row's f64 values, larger first, NaN above +inf when
/// `nan_largest`, magnitude when `by_magnitude`; ties keep index order.
pub fn reference_row(row: &[f64], k: usize, opts: &TopKOptions) -> Vec<i64> {
    let rank_value = |v: f64| {
        let v = if opts.by_magnitude { v.abs() } else { v };
        // (is NaN, value): NaN above everything; NaN rows never reach here under the error policy.
        (v.is_nan(), if v.is_nan() { 0.0 } else { v })
    };
    let mut idx: Vec<usize> = (0..row.len()).collect();
    idx.sort_by(|&a, &b| {
        let (na, va) = rank_value(row[a]);
        let (nb, vb) = rank_value(row[b]);
        nb.cmp(&na)
            .then(vb.partial_cmp(&va).expect("no NaN after the mapping"))
    });
    idx.truncate(k);
    if opts.order == Order::Index {
        idx.sort_unstable();
    }
    idx.into_iter().map(|i| i as i64).collect()
}

/// The reference for a whole tensor: (rows of indices, output shape).
pub fn reference(x: &Tensor, k: usize, opts: &TopKOptions) -> Result<(Vec<i64>, Vec<usize>)> {
    let flat: Vec<f64> = x
        .to_device(&Device::Cpu)?
        .flatten_all()?
        .to_dtype(DType::F64)?
        .to_vec1()?;
    let (n, mut shape) = match opts.mode {
        Mode::Flat => (flat.len(), vec![]),
        Mode::Rowwise => {
            let d = x.dims();
            (d[d.len() - 1], d[..d.len() - 1].to_vec())
        }
    };
    shape.push(k);
    let mut out = Vec::new();
    if n > 0 {
        for row in flat.chunks(n) {
            out.extend(reference_row(row, k, opts));
        }
    }
    Ok((out, shape))
}

/// Runs the selector and checks everything against the reference: shapes, dtypes, indices in range
/// and equal to the reference, values equal to the input at those indices.
pub fn check(x: &Tensor, k: usize, opts: &TopKOptions) -> Result<profk::TopK> {
    let got = profk::topk(x, k, opts)
        .with_context(|| format!("topk k={k} {opts:?} on {:?}", x.dims()))?;
    check_against_reference(x, k, opts, &got)?;
    Ok(got)
}

/// `check` with the plan (sample, t, capacity) instead of the computed one.
pub fn check_with_plan(
    x: &Tensor,
    k: usize,
    opts: &TopKOptions,
    (sample, t, capacity): (u64, u64, u64),
) -> Result<profk::TopK> {
    let plan = profk::Plan {
        sample,
        t,
        capacity,
    };
    let got = profk::topk_with_plan(x, k, opts, plan)?;
    check_against_reference(x, k, opts, &got)?;
    Ok(got)
}

pub fn check_against_reference(
    x: &Tensor,
    k: usize,
    opts: &TopKOptions,
    got: &profk::TopK,
) -> Result<()> {
    let (want, shape) = reference(x, k, opts)?;
    let what = || format!("k={k} dims={:?} dtype={:?} {opts:?}", x.dims(), x.dtype());
    let (indices, values) = (&got.indices, &got.values);
    for (ok, failure) in [
        (
            indices.dims() == shape.as_slice(),
            format!("index shape {:?} != {shape:?}", indices.dims()),
        ),
        (
            values.dims() == shape.as_slice(),
            format!("value shape {:?} != {shape:?}", values.dims()),
        ),
        (
            indices.dtype() == DType::I64,
            format!("indices are {:?}", indices.dtype()),
        ),
        (
            values.dtype() == x.dtype(),
            format!("values are {:?}", values.dtype()),
        ),
        (
            indices.device().same_device(x.device()),
            "indices on another device".into(),
        ),
    ] {
        ensure!(ok, "{failure}: {}", what());
    }
    let idx: Vec<i64> = got.indices.flatten_all()?.to_vec1()?;
    if idx != want {
        let first = idx.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
        anyhow::bail!(
            "indices differ at {first}: got {:?}, want {:?}: {}",
            &idx[first..(first + 8).min(idx.len())],
            &want[first..(first + 8).min(want.len())],
            what()
        );
    }
    // Values are the input's own elements at the indices (bit-exact through f64).
    let flat: Vec<f64> = x
        .to_device(&Device::Cpu)?
        .flatten_all()?
        .to_dtype(DType::F64)?
        .to_vec1()?;
    let vals: Vec<f64> = got
        .values
        .to_device(&Device::Cpu)?
        .flatten_all()?
        .to_dtype(DType::F64)?
        .to_vec1()?;
    let n = match opts.mode {
        Mode::Flat => flat.len(),
        Mode::Rowwise => x.dims()[x.rank() - 1],
    };
    for (j, (&i, &v)) in idx.iter().zip(&vals).enumerate() {
        let row = j.checked_div(k).unwrap_or(0);
        let expect = flat[row * n + i as usize];
        ensure!(
            expect.to_bits() == v.to_bits() || (expect.is_nan() && v.is_nan()),
            "value {j}: {v} != input {expect}: {}",
            what()
        );
    }
    Ok(())
}

/// Standard normal values with a fixed seed.
pub fn normal(len: usize, seed: u64) -> Vec<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..len)
        .map(|_| rng.sample::<f64, _>(rand_distr::StandardNormal))
        .collect()
}

/// Small integers: heavy ties.
pub fn small_ints(len: usize, levels: u32, seed: u64) -> Vec<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..len)
        .map(|_| f64::from(rng.random_range(0..levels)))
        .collect()
}

/// The adversarial rows of the post-mortem and the issue, each with the k values worth trying.
pub fn adversarial_rows() -> Vec<(&'static str, Vec<f64>)> {
    let inf = f64::INFINITY;
    let mut rows = vec![
        ("all equal", vec![1.5; 12]),
        (
            "ties at the k-th value",
            vec![3.0, 1.0, 2.0, 2.0, 5.0, 2.0, 2.0, 0.0, 2.0, 4.0],
        ),
        (
            "post-mortem masked row",
            (0..12)
                .map(|i| if i % 2 == 0 { i as f64 } else { -inf })
                .collect(),
        ),
        (
            "-inf prefix, 3 visible",
            [vec![-inf; 9], vec![1.0, 3.0, 2.0]].concat(),
        ),
        (
            "-inf tail, 2 visible",
            [vec![7.0, -1.0], vec![-inf; 10]].concat(),
        ),
        ("all -inf", vec![-inf; 11]),
        ("all +inf", vec![inf; 9]),
        (
            "+-inf and finite",
            vec![inf, -inf, 0.0, inf, -inf, -1.0, 1.0, inf, -inf],
        ),
        (
            "zeros of both signs",
            vec![0.0, -0.0, 0.0, -0.0, -1.0, 1.0, -0.0],
        ),
        (
            "large masked sentinel",
            vec![-1e30, 2.0, -1e30, -1e30, 1.0, -1e30, -1e30, -1e30],
        ),
        (
            "denormals f32/bf16",
            vec![1e-40, -1e-40, 2e-40, 0.0, -0.0, 1e-39, -3e-39, 5e-41],
        ),
        (
            "denormals f16",
            vec![6e-8, -6e-8, 1.2e-7, 0.0, 3e-5, -3e-5, 6e-5, 1e-6],
        ),
        ("one element", vec![-2.0]),
    ];
    rows.push((
        "denormals f64",
        vec![1e-310, -1e-310, 2e-310, 0.0, 5e-324, -5e-324, 1e-308],
    ));
    rows
}

/// The k values every adversarial row is tried with.
pub fn ks(n: usize) -> Vec<usize> {
    let mut k = vec![0, 1, n / 2, n.saturating_sub(1), n];
    k.sort_unstable();
    k.dedup();
    k
}

/// Adversarial rows, every dtype, k ∈ {0, 1, n/2, n−1, n}, every selector and order, by value and by
/// magnitude.
pub fn adversarial(dev: &Device) -> Result<()> {
    for (name, row) in adversarial_rows() {
        for dtype in dtypes(dev) {
            let x = tensor(&row, &[row.len()], dtype, dev)?;
            for k in ks(row.len()) {
                for base in option_grid() {
                    for by_magnitude in [false, true] {
                        let opts = TopKOptions {
                            by_magnitude,
                            ..base.clone()
                        };
                        check(&x, k, &opts).with_context(|| format!("row '{name}'"))?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// The post-mortem's failing case, spelled out: the two trailing picks are masked columns' own
/// indices, lowest first, not a repeated column.
pub fn masked_row_returns_its_own_columns(dev: &Device) -> Result<()> {
    let inf = f64::INFINITY;
    let row: Vec<f64> = (0..12)
        .map(|i| if i % 2 == 0 { i as f64 } else { -inf })
        .collect();
    for dtype in dtypes(dev) {
        let got = profk::topk(
            &tensor(&row, &[12], dtype, dev)?,
            8,
            &TopKOptions::default(),
        )?;
        let idx: Vec<i64> = got.indices.to_vec1()?;
        ensure!(idx == vec![10, 8, 6, 4, 2, 0, 1, 3], "{dtype:?}: {idx:?}");
    }
    Ok(())
}

/// Long rows that take the sampling path, with the same adversarial structure: ties at the boundary,
/// masked rows with fewer than k visible values, all-equal rows, all-masked rows.
pub fn adversarial_long_rows(dev: &Device) -> Result<()> {
    let n = 3 * profk::select::PROFK_MIN_N + 5;
    let inf = f64::INFINITY;
    let mut visible = vec![-inf; n];
    for i in (0..n).step_by(n / 5) {
        visible[i] = i as f64;
    }
    let rows = vec![
        ("ten levels", small_ints(n, 10, 1)),
        ("all equal", vec![0.25; n]),
        ("five visible", visible),
        ("all -inf", vec![-inf; n]),
        ("normal", normal(n, 2)),
    ];
    for (name, row) in rows {
        for dtype in dtypes(dev) {
            let x = tensor(&row, &[row.len()], dtype, dev)?;
            for k in [1, 7, 100, 2000] {
                for order in [Order::Desc, Order::Index] {
                    for by_magnitude in [false, true] {
                        let opts = TopKOptions {
                            order,
                            by_magnitude,
                            ..TopKOptions::default()
                        };
                        check(&x, k, &opts).with_context(|| format!("row '{name}'"))?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// NaN: an error naming the count and the first flat index by default; above +inf, ties by index,
/// with `nan = largest`. Short and long rows, row-wise and flat.
pub fn nan_policies(dev: &Device) -> Result<()> {
    let nan = f64::NAN;
    for n in [10, 2 * profk::select::PROFK_MIN_N] {
        let mut data = normal(3 * n, 5);
        let planted = [n + 3, n + 7, 2 * n + 1];
        for &i in &planted {
            data[i] = nan;
        }
        data[4] = f64::INFINITY;
        for dtype in dtypes(dev) {
            let x = tensor(&data, &[3, n], dtype, dev)?;
            for mode in [Mode::Rowwise, Mode::Flat] {
                for selector in [
                    Selector::Profk,
                    Selector::Select,
                    Selector::Radix,
                    Selector::Sort,
                ] {
                    let opts = TopKOptions {
                        mode,
                        selector,
                        ..TopKOptions::default()
                    };
                    match profk::topk(&x, 2, &opts) {
                        Err(profk::Error::NaN { count, first }) => {
                            ensure!(
                                (count, first) == (3, n + 3),
                                "n={n} {dtype:?} {opts:?}: {count} NaN, first {first}"
                            )
                        }
                        other => anyhow::bail!(
                            "n={n} {dtype:?} {opts:?}: expected a NaN error, got {other:?}"
                        ),
                    }
                    let largest = TopKOptions {
                        nan: NanPolicy::Largest,
                        ..opts
                    };
                    for k in [1, 3, 5] {
                        let got = check(&x, k, &largest)?;
                        if mode == Mode::Flat && k >= 3 {
                            let idx: Vec<i64> = got.indices.to_vec1()?;
                            let top: Vec<i64> = planted.iter().map(|&i| i as i64).collect();
                            ensure!(
                                largest.order != Order::Desc || idx[..3] == top[..],
                                "NaNs first by index: {idx:?}"
                            );
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// k = 0 gives empty outputs of the right shapes; k = n works; k > n is a clear error.
pub fn k_bounds(dev: &Device) -> Result<()> {
    let x = tensor(&normal(24, 9), &[2, 3, 4], DType::F32, dev)?;
    let empty = profk::topk(&x, 0, &TopKOptions::default())?;
    ensure!(
        empty.values.dims() == [2, 3, 0] && empty.indices.dims() == [2, 3, 0],
        "{:?}",
        empty.values.dims()
    );
    let flat = TopKOptions {
        mode: Mode::Flat,
        ..TopKOptions::default()
    };
    ensure!(profk::topk(&x, 0, &flat)?.indices.dims() == [0]);
    check(&x, 4, &TopKOptions::default())?;
    check(&x, 24, &flat)?;
    match profk::topk(&x, 5, &TopKOptions::default()) {
        Err(profk::Error::KTooLarge { k: 5, n: 4 }) => {}
        other => anyhow::bail!("k > n: {other:?}"),
    }
    match profk::topk(&x, 25, &flat) {
        Err(profk::Error::KTooLarge { k: 25, n: 24 }) => {}
        other => anyhow::bail!("k > n flat: {other:?}"),
    }
    // Empty batch, empty rows, and a scalar (flat only).
    for (dims, k, want) in [([0, 5], 2, [0, 2]), ([3, 0], 0, [3, 0])] {
        let empty = tensor(&[], &dims, DType::F32, dev)?;
        let got = profk::topk(&empty, k, &TopKOptions::default())?;
        ensure!(got.indices.dims() == want, "{dims:?}, k {k}");
    }
    let scalar = Tensor::new(2.5f32, dev)?;
    ensure!(matches!(
        profk::topk(&scalar, 1, &TopKOptions::default()),
        Err(profk::Error::Shape { .. })
    ));
    check(&scalar, 1, &flat)?;
    // Bad options are errors, not panics.
    let bad_eps = TopKOptions {
        eps: 0.0,
        ..TopKOptions::default()
    };
    ensure!(matches!(
        profk::topk(&x, 1, &bad_eps),
        Err(profk::Error::Param(_))
    ));
    let ints = Tensor::new(&[1u32, 2, 3], dev)?;
    ensure!(matches!(
        profk::topk(&ints, 1, &TopKOptions::default()),
        Err(profk::Error::DType(DType::U32))
    ));
    Ok(())
}

/// Batch shapes, flat indices, and strided views (a non-contiguous input and a view with an offset).
pub fn shapes_and_views(dev: &Device) -> Result<()> {
    let data = normal(4 * 6 * 50, 11);
    for dtype in dtypes(dev) {
        let x = tensor(&data, &[4, 6, 50], dtype, dev)?;
        for mode in [Mode::Rowwise, Mode::Flat] {
            for k in [1, 5, 50] {
                check(
                    &x,
                    k,
                    &TopKOptions {
                        mode,
                        ..TopKOptions::default()
                    },
                )?;
            }
        }
        let transposed = x.transpose(1, 2)?;
        check(&transposed, 3, &TopKOptions::default())?;
        let offset = x.narrow(0, 1, 2)?.narrow(1, 2, 3)?;
        check(&offset, 7, &TopKOptions::default())?;
        check(
            &x.narrow(0, 3, 1)?,
            9,
            &TopKOptions {
                mode: Mode::Flat,
                ..TopKOptions::default()
            },
        )?;
    }
    Ok(())
}

/// Seeded random inputs over sizes, dtypes, k, orders, batch shapes, magnitude ranking and selectors.
pub fn random_sweep(dev: &Device) -> Result<()> {
    let mut rng = ChaCha8Rng::seed_from_u64(0xfeed);
    let sizes = [
        1usize,
        2,
        17,
        300,
        5000,
        profk::select::PROFK_MIN_N + 1,
        70_000,
    ];
    for case in 0..60 {
        let n = sizes[case % sizes.len()];
        let rows = [1usize, 3, 16][case % 3];
        let dtype = dtypes(dev)[case % dtypes(dev).len()];
        let data = match case % 4 {
            0 => small_ints(rows * n, 5, case as u64),
            _ => normal(rows * n, case as u64),
        };
        let x = tensor(&data, &[rows, n], dtype, dev)?;
        let k = [0, 1, rng.random_range(0..=n), n.min(64), n][case % 5];
        let opts = TopKOptions {
            selector: [
                Selector::Profk,
                Selector::Profk,
                Selector::Select,
                Selector::Radix,
                Selector::Sort,
            ][case % 5],
            order: if rng.random_bool(0.5) {
                Order::Desc
            } else {
                Order::Index
            },
            mode: if case % 7 == 0 {
                Mode::Flat
            } else {
                Mode::Rowwise
            },
            by_magnitude: rng.random_bool(0.3),
            seed: rng.random(),
            ..TopKOptions::default()
        };
        check(&x, k, &opts).with_context(|| format!("case {case}"))?;
    }
    Ok(())
}

/// Outputs of every size the output stage treats apart (a block per slice of 128 for few rows, a
/// block per row by the smallest block sort that holds k, CUB's sort), both orders, by value and by magnitude, on ties, masked tails and
/// random values.
pub fn long_outputs(dev: &Device) -> Result<()> {
    let n = 1 << 16;
    let inf = f64::INFINITY;
    let masked: Vec<f64> = normal(n, 31)
        .into_iter()
        .enumerate()
        .map(|(i, v)| if i >= n / 2 { -inf } else { v })
        .collect();
    let inputs = [
        ("normal", normal(3 * n, 30)),
        ("eight levels", small_ints(3 * n, 8, 32)),
        // About 32 of each value a row: runs of equal keys on both sides of the longest a thread
        // reorders alone.
        ("2048 levels", small_ints(3 * n, 2048, 35)),
        ("masked tail", masked.repeat(3)),
    ];
    for (name, data) in &inputs {
        for rows in [1usize, 3] {
            let x = tensor(&data[..rows * n], &[rows, n], DType::F32, dev)?;
            for k in [129, 4097, 8192, 20_000, 40_000] {
                for order in [Order::Desc, Order::Index] {
                    let opts = TopKOptions {
                        order,
                        by_magnitude: k == 8192,
                        ..TopKOptions::default()
                    };
                    check(&x, k, &opts)
                        .with_context(|| format!("{name}, {rows} rows, k = {k}, {order:?}"))?;
                }
            }
        }
    }
    // One run of equal keys over the most pieces a sort by key alone ranks among (k = 2^18), and runs
    // of about 4 000 crossing its pieces' edges.
    let n = 1 << 19;
    for (name, data) in [
        ("all equal", vec![0.5; n]),
        ("128 levels", small_ints(n, 128, 36)),
    ] {
        let x = tensor(&data, &[n], DType::F32, dev)?;
        check(&x, 1 << 18, &TopKOptions::default()).with_context(|| format!("{name}, k = 2^18"))?;
    }
    // One row whose k-th largest sits inside 3 000 copies of one value: the bin of the filter's
    // histogram that holds it is crowded with ties but small enough to be selected in one block.
    let k = 1 << 17;
    let mut data = normal(n, 37);
    let mut sorted = data.clone();
    sorted.sort_by(|a, b| b.total_cmp(a));
    let at_kth = sorted[k - 1];
    for i in (0..n).step_by(n / 3000).take(3000) {
        data[i] = at_kth;
    }
    let x = tensor(&data, &[n], DType::F32, dev)?;
    for order in [Order::Desc, Order::Index] {
        let opts = TopKOptions {
            order,
            ..TopKOptions::default()
        };
        check(&x, k, &opts).with_context(|| format!("3 000 ties at the k-th, {order:?}"))?;
    }
    // Enough rows for a block per row: each of its block sorts (k up to 1024, 2048, 4096).
    let (rows, n) = (48, 5000);
    for (name, data) in [
        ("normal", normal(rows * n, 33)),
        ("eight levels", small_ints(rows * n, 8, 34)),
    ] {
        let x = tensor(&data, &[rows, n], DType::F32, dev)?;
        for k in [1000, 2000, 4000] {
            for order in [Order::Desc, Order::Index] {
                let opts = TopKOptions {
                    order,
                    ..TopKOptions::default()
                };
                check(&x, k, &opts)
                    .with_context(|| format!("{name}, {rows} rows, k = {k}, {order:?}"))?;
            }
        }
    }
    Ok(())
}

/// Plans that fail on purpose: the answer stays exact, and the statistics show the redraws and the
/// fallback.
pub fn forced_redraws_and_fallback(dev: &Device) -> Result<()> {
    let n = 20_000;
    let x = tensor(&normal(2 * n, 21), &[2, n], DType::F32, dev)?;
    let opts = TopKOptions::default();
    // A capacity below k fails the check on every attempt, so both rows fall back.
    let got = check_with_plan(&x, 50, &opts, (64, 8, 10))?;
    let s = &got.stats;
    ensure!(s.fell_back && s.fallbacks == 2 && s.attempts >= 2, "{s:?}");
    ensure!(s.recall_failures + s.overflows == s.total_attempts, "{s:?}");
    // One row falls back too, however many attempts its device takes first; its sorted outputs
    // come from the fallback's composites, few or more than one block gathers at once.
    let one = tensor(&normal(n, 23), &[n], DType::F32, dev)?;
    for k in [50, 3000] {
        for order in [Order::Desc, Order::Index] {
            let opts = TopKOptions {
                order,
                ..TopKOptions::default()
            };
            let got = check_with_plan(&one, k, &opts, (64, 8, 10))?;
            let s = &got.stats;
            ensure!(s.fell_back && s.fallbacks == 1, "k={k} {order:?}: {s:?}");
        }
    }
    // The largest of 16 samples as threshold with k = 1000 of 20000 and capacity 2000: an attempt
    // succeeds with probability about 1/4, so redraws are common.
    let mut redrawn = 0;
    for seed in 0..20 {
        let coin = TopKOptions {
            seed,
            ..TopKOptions::default()
        };
        let got = check_with_plan(&x, 1000, &coin, (16, 1, 2000))?;
        redrawn += u64::from(got.stats.attempts > 1);
    }
    ensure!(redrawn > 0, "no redraw in 20 coin-flip calls");
    // Samples and buffers too large for one block (their selections take the multi-block paths), on
    // one row and on three.
    for rows in [1, 3] {
        let n = 200_000;
        let x = tensor(&normal(rows * n, 22), &[rows, n], DType::F32, dev)?;
        for order in [Order::Desc, Order::Index] {
            let opts = TopKOptions {
                order,
                ..TopKOptions::default()
            };
            let got = check_with_plan(&x, 1000, &opts, (20_000, 130, 20_000))?;
            ensure!(!got.stats.fell_back, "{:?}", got.stats);
        }
    }
    Ok(())
}

/// Rows of n whose top lists are hard to order: keys that spread over many digits, pile up in eight
/// levels or one value (the order then comes from the index bits), end in -inf, hold NaN and ±inf,
/// or zeros of both signs (one key).
pub fn adversarial_lists(n: usize, seed: u64) -> Vec<(&'static str, Vec<f64>)> {
    let inf = f64::INFINITY;
    let mut spiky = normal(n, seed + 1);
    for (i, v) in spiky.iter_mut().enumerate() {
        if i % 7 == 0 {
            *v = f64::NAN;
        } else if i % 11 == 0 {
            *v = inf;
        } else if i % 2 == 0 {
            *v = -inf;
        }
    }
    vec![
        ("normal", normal(n, seed)),
        ("eight levels", small_ints(n, 8, seed + 2)),
        ("all equal", vec![0.75; n]),
        (
            "half -inf",
            (0..n).map(|i| if i < n / 2 { -inf } else { 1.0 }).collect(),
        ),
        ("nan, inf and -inf", spiky),
        (
            "zeros of both signs",
            (0..n)
                .map(|i| if i % 3 == 0 { -0.0 } else { 0.0 })
                .collect(),
        ),
    ]
}

/// NaN largest, by value and by magnitude.
pub fn by_value_and_magnitude() -> [TopKOptions; 2] {
    let nan_largest = TopKOptions {
        nan: NanPolicy::Largest,
        ..TopKOptions::default()
    };
    let magnitude = TopKOptions {
        by_magnitude: true,
        ..nan_largest.clone()
    };
    [nan_largest, magnitude]
}

/// Buffers of tens of thousands whose top-k is sorted straight from them (few rows, values
/// descending): the rows of [`adversarial_lists`], with NaN largest and by magnitude, on one row and
/// on two, in every dtype; outputs short for one block's slice, and long enough for slices of 512.
pub fn sorted_from_buffers(dev: &Device) -> Result<()> {
    let n = 100_000;
    let rows = adversarial_lists(n, 40);
    let [nan_largest, magnitude] = by_value_and_magnitude();
    for (name, row) in &rows {
        for dtype in dtypes(dev) {
            for count in [1usize, 2] {
                let data = row.repeat(count);
                let x = tensor(&data, &[count, n], dtype, dev)?;
                // About 6300 kept of k = 5000 (sample rate 0.041, threshold rank 260), and k = 40.
                for (k, plan) in [(5000, (4096, 260, 12_000)), (40, (4096, 4, 2000))] {
                    for opts in [&nan_largest, &magnitude] {
                        check_with_plan(&x, k, opts, plan).with_context(|| {
                            format!("'{name}', {count} rows, {dtype:?}, k = {k}, {opts:?}")
                        })?;
                    }
                }
            }
        }
    }
    // Slices of 512 output places, gathered a thousand at a time: about 65 000 kept of k = 60 000.
    let n = 400_000;
    for (name, row) in [
        ("normal", normal(n, 43)),
        ("eight levels", small_ints(n, 8, 44)),
    ] {
        let x = tensor(&row, &[n], DType::F32, dev)?;
        check_with_plan(&x, 60_000, &nan_largest, (16_384, 2660, 80_000))
            .with_context(|| format!("'{name}', k = 60000"))?;
    }
    Ok(())
}

/// Rows that fail every attempt (a capacity below k), on both paths that rank them: one row, whose
/// list its output launch reads whole and so ranks from the input itself (no fallback launch), and
/// two rows (the fallback's composites). The rows of [`adversarial_lists`], by value and by
/// magnitude, in every dtype, with k from 2 to n - 1.
pub fn fallen_back_rows(dev: &Device) -> Result<()> {
    let n = 50_000;
    let rows = adversarial_lists(n, 50);
    let [nan_largest, magnitude] = by_value_and_magnitude();
    for (name, row) in &rows {
        for dtype in dtypes(dev) {
            for count in [1usize, 2] {
                let x = tensor(&row.repeat(count), &[count, n], dtype, dev)?;
                for k in [2, 37, 3000, n - 1] {
                    for opts in [&nan_largest, &magnitude] {
                        let what =
                            || format!("'{name}', {count} rows, {dtype:?}, k = {k}, {opts:?}");
                        let got = check_with_plan(&x, k, opts, (1024, 4, k as u64 - 1))
                            .with_context(what)?;
                        let s = &got.stats;
                        ensure!(
                            s.fell_back && s.fallbacks == count as u64,
                            "{}: {s:?}",
                            what()
                        );
                    }
                }
            }
        }
    }
    Ok(())
}

/// `topk_gather`: the gathered rows match the indices; shapes are validated with clear errors.
pub fn gather(dev: &Device) -> Result<()> {
    let inf = f64::INFINITY;
    let (b, q, n, m) = (2, 3, 12, 4);
    let mut scores = normal(b * q * n, 31);
    for s in scores.iter_mut().take(n).skip(3) {
        *s = -inf; // the first row has 3 visible candidates, fewer than k
    }
    let scores = tensor(&scores, &[b, q, n], DType::F32, dev)?;
    let values = Tensor::arange(0f32, (b * q * n * m) as f32, dev)?.reshape((b, q, n, m))?;
    for k in [0, 1, 8, n] {
        let (gathered, idx) = profk::topk_gather(&scores, &values, k, &TopKOptions::default())?;
        ensure!(gathered.dims() == [b, q, k, m] && idx.dims() == [b, q, k]);
        let g: Vec<f32> = gathered.flatten_all()?.to_vec1()?;
        let ix: Vec<i64> = idx.flatten_all()?.to_vec1()?;
        for (j, &i) in ix.iter().enumerate() {
            let row = j / k;
            for c in 0..m {
                ensure!(
                    g[j * m + c] == ((row * n + i as usize) * m + c) as f32,
                    "row {row} pick {i}"
                );
            }
        }
        check_against_reference(
            &scores,
            k,
            &TopKOptions::default(),
            &profk::topk(&scores, k, &TopKOptions::default())?,
        )?;
    }
    let bad = Tensor::zeros((b, q, n + 1, m), DType::F32, dev)?;
    ensure!(matches!(
        profk::topk_gather(&scores, &bad, 2, &TopKOptions::default()),
        Err(profk::Error::Shape { .. })
    ));
    let flat_values = Tensor::zeros((b, q, n), DType::F32, dev)?;
    ensure!(matches!(
        profk::topk_gather(&scores, &flat_values, 2, &TopKOptions::default()),
        Err(profk::Error::Shape { .. })
    ));
    ensure!(matches!(
        profk::topk_gather(&scores, &values, n + 1, &TopKOptions::default()),
        Err(profk::Error::KTooLarge { .. })
    ));
    Ok(())
}

/// Callers on several threads at once, each queuing its calls before reading any: every answer is
/// exact. candle's CUDA tensors live on the per-thread default stream, one handle for a different
/// stream on every thread, so scratch memory and records kept for a stream's next call must not pass
/// to another thread while the work queued on them runs.
pub fn concurrent_callers(dev: &Device) -> Result<()> {
    let k = 1000;
    std::thread::scope(|scope| {
        let callers: Vec<_> = (0..4u64)
            .map(|t| {
                scope.spawn(move || -> Result<()> {
                    let shapes = [[1, (1 << 20) + 77 * t as usize], [3, 300_000]];
                    let xs = (0..6u64)
                        .map(|i| {
                            let dims = shapes[(i % 2) as usize];
                            tensor(
                                &normal(dims[0] * dims[1], 100 + 10 * t + i),
                                &dims,
                                DType::F32,
                                dev,
                            )
                        })
                        .collect::<Result<Vec<_>>>()?;
                    let opts = |i: usize| TopKOptions {
                        order: if i % 3 == 2 {
                            Order::Index
                        } else {
                            Order::Desc
                        },
                        ..TopKOptions::default()
                    };
                    let got = queue_then_read(&xs, k, opts)?;
                    for (i, (x, g)) in xs.iter().zip(&got).enumerate() {
                        check_against_reference(x, k, &opts(i), g)
                            .with_context(|| format!("caller {t}, call {i}"))?;
                    }
                    Ok(())
                })
            })
            .collect();
        callers.into_iter().try_for_each(|c| {
            c.join()
                .map_err(|_| anyhow::anyhow!("a caller thread panicked"))?
        })
    })
}

/// Every call of `xs` queued first (on CUDA, without a host synchronization), then every answer read.
fn queue_then_read(
    xs: &[Tensor],
    k: usize,
    opts: impl Fn(usize) -> TopKOptions,
) -> Result<Vec<profk::TopK>> {
    #[cfg(feature = "cuda")]
    if xs.first().is_some_and(|x| x.device().is_cuda()) {
        let queued = xs
            .iter()
            .enumerate()
            .map(|(i, x)| profk::cuda::topk_deferred(x, k, &opts(i)))
            .collect::<profk::Result<Vec<_>>>()?;
        return queued
            .into_iter()
            .map(|d| {
                Ok(profk::TopK {
                    stats: d.status.read()?,
                    values: d.values,
                    indices: d.indices,
                })
            })
            .collect();
    }
    xs.iter()
        .enumerate()
        .map(|(i, x)| Ok(profk::topk(x, k, &opts(i))?))
        .collect()
}

/// A batch of many short rows and a batch of long rows agree with the reference (the two ways of
/// parallelizing). The long rows are sampled on the CPU; on CUDA so few rows of this size are split
/// over the SMs by the histogram selection, which samples nothing.
pub fn many_rows(dev: &Device) -> Result<()> {
    let x = tensor(&normal(512 * 257, 41), &[512, 257], DType::BF16, dev)?;
    check(&x, 16, &TopKOptions::default())?;
    let n = 4 * profk::select::PROFK_MIN_N;
    let long = tensor(&normal(6 * n, 42), &[6, n], DType::F32, dev)?;
    let got = check(&long, 32, &TopKOptions::default())?;
    let s = &got.stats;
    let path_ok = if dev.is_cuda() {
        s.exact_rows == 6 && s.attempts == 0 && !s.fell_back
    } else {
        s.exact_rows == 0 && s.attempts >= 1
    };
    ensure!(s.rows == 6 && path_ok, "{s:?}");
    Ok(())
}

/// Sampling is uniform without replacement: over many rows, each an independent attempt, the observed
/// numbers of R < k and R > M agree with the exact probabilities of `params::failure_probabilities`
/// within 4σ of a binomial count. Run on distinct values and on heavy ties (the index tie-break makes
/// the ranks distinct, so the theory is exact for both).
pub fn failure_rates_match_theory(dev: &Device) -> Result<()> {
    let (rows, n, k, sample) = (4000usize, 1000usize, 10usize, 100u64);
    // The (t, M) whose two failure probabilities lie closest to 8% each.
    let mut best = (f64::INFINITY, 0, 0, 0.0, 0.0);
    for t in 1..=sample {
        for m in (k as u64..=n as u64).step_by(5) {
            let (pa, pb) = profk::params::failure_probabilities(n as u64, k as u64, sample, t, m);
            let dist = (pa - 0.08).abs() + (pb - 0.08).abs();
            if dist < best.0 {
                best = (dist, t, m, pa, pb);
            }
        }
    }
    let (_, t, capacity, pa, pb) = best;
    ensure!(
        (0.02..0.2).contains(&pa) && (0.02..0.2).contains(&pb),
        "no useful plan: {best:?}"
    );
    for (name, data) in [
        ("normal", normal(rows * n, 51)),
        ("ties", small_ints(rows * n, 7, 52)),
    ] {
        let x = tensor(&data, &[rows, n], DType::F32, dev)?;
        let opts = TopKOptions {
            seed: 77,
            ..TopKOptions::default()
        };
        let got = check_with_plan(&x, k, &opts, (sample, t, capacity))?;
        let s = &got.stats;
        let trials = s.total_attempts as f64;
        for (what, observed, p) in [("R < k", s.recall_failures, pa), ("R > M", s.overflows, pb)] {
            let (mean, sd) = (trials * p, (trials * p * (1.0 - p)).sqrt());
            ensure!(
                (observed as f64 - mean).abs() <= 4.0 * sd,
                "{name}: {what} seen {observed} times in {trials} attempts, expected {mean:.1} ± {sd:.1} (t={t}, M={capacity})"
            );
        }
    }
    Ok(())
}

/// Approximate mode skips the redraw after an overflow: the answer may miss elements, but it is still
/// k distinct in-range indices of the input with their own values, in the requested order; with a
/// sound plan it is exact.
pub fn approximate_mode(dev: &Device) -> Result<()> {
    let n = 20_000;
    let x = tensor(&normal(n, 61), &[n], DType::F32, dev)?;
    let data: Vec<f64> = x.to_dtype(DType::F64)?.to_vec1()?;
    let opts = TopKOptions {
        approximate: true,
        ..TopKOptions::default()
    };
    check(&x, 40, &opts)?;
    let tight = profk::Plan {
        sample: 200,
        t: 20,
        capacity: 100,
    };
    let got = profk::topk_with_plan(&x, 40, &opts, tight)?;
    let idx: Vec<i64> = got.indices.to_vec1()?;
    let vals: Vec<f32> = got.values.to_vec1()?;
    let mut seen = std::collections::HashSet::new();
    for (j, (&i, &v)) in idx.iter().zip(&vals).enumerate() {
        ensure!(
            (0..n as i64).contains(&i) && seen.insert(i),
            "index {i} repeated or out of range"
        );
        ensure!(data[i as usize] == f64::from(v), "value {j}");
        ensure!(j == 0 || vals[j - 1] >= v, "not descending at {j}");
    }
    ensure!(idx.len() == 40 && got.stats.attempts >= 1);
    Ok(())
}
