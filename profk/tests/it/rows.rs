//! Row-wise selection at the shapes of the CUDA histogram selection (short rows at any count, rows of
//! up to 2^15 that fill the device, few rows split over the SMs), against the full-sort reference on
//! every device: random and adversarial rows, f32/bf16/f16, both orders, by value and by magnitude, k
//! from 0 to n, unaligned rows, and rows whose threshold bin is too large for the kernel's buffer (the
//! dense fallback in the same call).
use crate::common;

use anyhow::{ensure, Context, Result};
use candle_core::{DType, Device};
use common::{check, normal, small_ints, tensor};
use profk::{NanPolicy, Order, TopKOptions};
use runtime::test_device;

const DTYPES: [DType; 3] = [DType::F32, DType::BF16, DType::F16];

/// Every order and ranking for one input and k.
fn check_all(x: &candle_core::Tensor, k: usize, nan: NanPolicy) -> Result<()> {
    for order in [Order::Desc, Order::Index] {
        for by_magnitude in [false, true] {
            let opts = TopKOptions {
                order,
                by_magnitude,
                nan,
                ..TopKOptions::default()
            };
            check(x, k, &opts)?;
        }
    }
    Ok(())
}

fn ks(n: usize) -> Vec<usize> {
    let mut k = vec![0, 1, 7.min(n), n / 2, n.saturating_sub(1), n];
    k.sort_unstable();
    k.dedup();
    k
}

/// Random rows over lengths with every alignment of the row start (n mod 8), short and long.
pub fn random_rows(dev: &Device) -> Result<()> {
    for (case, (rows, n)) in [(3, 1), (5, 17), (4, 1000), (3, 4099), (2, 4103), (2, 16384)]
        .into_iter()
        .enumerate()
    {
        let data = match case % 2 {
            0 => normal(rows * n, case as u64),
            _ => small_ints(rows * n, 50, case as u64),
        };
        for dtype in DTYPES {
            let x = tensor(&data, &[rows, n], dtype, dev)?;
            for k in ks(n) {
                check_all(&x, k, NanPolicy::Error)
                    .with_context(|| format!("{rows}x{n} {dtype:?}"))?;
            }
            // A view whose rows start mid-vector.
            if rows > 2 {
                check_all(&x.narrow(0, 1, rows - 1)?, n.min(5), NanPolicy::Error)?;
            }
        }
    }
    Ok(())
}

/// Rows that defeat a histogram: all equal, ties at the k-th value, sorted both ways, ±inf, masked
/// tails and prefixes, NaN above +inf, denormals; longer than the kernel's buffer so that the
/// threshold bin of a tied row overflows it.
pub fn adversarial_rows(dev: &Device) -> Result<()> {
    let n = 5000;
    let inf = f64::INFINITY;
    let ramp: Vec<f64> = (0..n).map(|i| i as f64 / 64.0).collect();
    let masked_tail: Vec<f64> = normal(n, 3)
        .into_iter()
        .enumerate()
        .map(|(i, v)| if i < n / 2 { v } else { -inf })
        .collect();
    let mut three_visible = vec![-inf; n];
    three_visible[10] = 1.0;
    three_visible[4000] = 3.0;
    three_visible[4999] = 1.0;
    let mut with_nan = normal(n, 4);
    for i in [7, 100, 4321] {
        with_nan[i] = f64::NAN;
    }
    with_nan[50] = inf;
    let rows: Vec<(&str, Vec<f64>)> = vec![
        ("all equal", vec![1.5; n]),
        ("four levels", small_ints(n, 4, 5)),
        ("ascending", ramp.clone()),
        ("descending", ramp.iter().rev().copied().collect()),
        (
            "+-inf and zeros",
            (0..n).map(|i| [inf, -inf, 0.0, -0.0, 1.0][i % 5]).collect(),
        ),
        ("masked tail", masked_tail),
        ("three visible", three_visible),
        ("all -inf", vec![-inf; n]),
        (
            "denormals",
            (0..n).map(|i| (i % 7) as f64 * 1e-40 - 3e-40).collect(),
        ),
        ("nan", with_nan),
    ];
    for (name, row) in rows {
        let nan = if name == "nan" {
            NanPolicy::Largest
        } else {
            NanPolicy::Error
        };
        let data = [row.clone(), row].concat();
        for dtype in DTYPES {
            let x = tensor(&data, &[2, n], dtype, dev)?;
            for k in [1, 3, 64, n / 2, n - 1, n] {
                check_all(&x, k, nan).with_context(|| format!("row '{name}' {dtype:?}"))?;
            }
        }
    }
    Ok(())
}

/// The tie rule spelled out: among equal values the lowest indices, in both orders; on CUDA the
/// all-equal row is one bin larger than the kernel's buffer and goes to the dense selection.
pub fn ties_to_the_lowest_index(dev: &Device) -> Result<()> {
    for (n, k) in [(300, 5), (5000, 5)] {
        let x = tensor(&vec![2.0; 2 * n], &[2, n], DType::BF16, dev)?;
        for order in [Order::Desc, Order::Index] {
            let got = profk::topk(
                &x,
                k,
                &TopKOptions {
                    order,
                    ..TopKOptions::default()
                },
            )?;
            let idx: Vec<i64> = got.indices.flatten_all()?.to_vec1()?;
            ensure!(
                idx == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4],
                "n={n} {order:?}: {idx:?}"
            );
            if dev.is_cuda() {
                let fell = u64::from(n > 4096) * 2;
                ensure!(got.stats.fallbacks == fell, "n={n}: {:?}", got.stats);
            }
        }
    }
    // Ties across the threshold: values 1 and 2 interleaved, k inside the run of 1s.
    let row: Vec<f64> = (0..64).map(|i| f64::from(1 + (i % 3 == 0) as u8)).collect();
    let x = tensor(&row, &[1, 64], DType::F32, dev)?;
    let got = profk::topk(&x, 24, &TopKOptions::default())?;
    let idx: Vec<i64> = got.indices.flatten_all()?.to_vec1()?;
    let mut want: Vec<i64> = (0..64).step_by(3).collect();
    want.extend([1, 2]);
    ensure!(idx == want, "{idx:?}");
    Ok(())
}

/// Batches of rows longer than the short-row limit, enough to fill a GPU, random and masked (the
/// block-selection shape: the second half of every row at -inf), and rows of 2^16.
pub fn many_long_rows(dev: &Device) -> Result<()> {
    let (rows, n) = (136, 20_003);
    let inf = f64::INFINITY;
    let data = normal(rows * n, 7);
    let masked: Vec<f64> = data
        .iter()
        .enumerate()
        .map(|(i, &v)| if i % n < n / 2 { v } else { -inf })
        .collect();
    for (name, d) in [("normal", &data), ("masked", &masked)] {
        for dtype in DTYPES {
            let x = tensor(d, &[rows, n], dtype, dev)?;
            for k in [64, 512] {
                for order in [Order::Desc, Order::Index] {
                    let opts = TopKOptions {
                        order,
                        ..TopKOptions::default()
                    };
                    check(&x, k, &opts).with_context(|| format!("{name} {dtype:?}"))?;
                }
            }
        }
    }
    let x = tensor(
        &normal(rows * (1 << 16), 8),
        &[rows, 1 << 16],
        DType::F32,
        dev,
    )?;
    check(&x, 1024, &TopKOptions::default())?;
    // k = 64 keeps these rows on one block each (k <= n/256), index order from a bitmap of the row.
    for order in [Order::Desc, Order::Index] {
        let opts = TopKOptions {
            order,
            ..TopKOptions::default()
        };
        check(&x, 64, &opts)?;
    }
    Ok(())
}

/// Rows of 2^17 with k = 512, one block each: most blocks' only row takes its guess from a sample, and
/// index order sorts the k instead of taking a bitmap of the row (too long for the block's buffer).
/// On CUDA most rows must be read once.
pub fn long_rows_large_k(dev: &Device) -> Result<()> {
    let (rows, n) = (560, 1 << 17);
    let x = tensor(&normal(rows * n, 13), &[rows, n], DType::F32, dev)?;
    for order in [Order::Desc, Order::Index] {
        let opts = TopKOptions {
            order,
            ..TopKOptions::default()
        };
        let got = check(&x, 512, &opts).with_context(|| format!("{order:?}"))?;
        ensure!(
            !dev.is_cuda() || got.stats.read_once > rows as u64 / 2,
            "{order:?}: {} of {rows} rows read once",
            got.stats.read_once
        );
    }
    Ok(())
}

/// More rows than a GPU keeps blocks resident (528 on an H200), so that each block selects several
/// rows and carries its guess from one to the next: runs of alike rows (the guess holds, the
/// row is read once) changing every 800 rows, and every fifth row scaled up or down by 10^4, masked,
/// tied or all equal (the guess keeps too many, misses the k-th or lands on a tied bin, and the row
/// takes the second read or the dense selection). k up to and past the largest the row kernel sorts
/// itself.
pub fn carried_thresholds(dev: &Device) -> Result<()> {
    let (rows, n) = (2400, 700);
    let base = normal(rows * n, 10);
    let ties = small_ints(rows * n, 6, 11);
    let data: Vec<f64> = (0..rows * n)
        .map(|i| {
            let (r, j) = (i / n, i % n);
            let alike = if r / 800 == 1 {
                3.0 * base[i] + 1.0
            } else {
                base[i]
            };
            match (r % 5, r / 5 % 5) {
                (0..=3, _) => alike,
                (_, 0) => base[i] * 1e4,
                (_, 1) => base[i] * 1e-4,
                (_, 2) if j >= n / 3 => f64::NEG_INFINITY,
                (_, 2) => base[i],
                (_, 3) => ties[i],
                _ => 0.5,
            }
        })
        .collect();
    for dtype in DTYPES {
        let x = tensor(&data, &[rows, n], dtype, dev)?;
        for k in [1, 64, 350, n] {
            check_all(&x, k, NanPolicy::Error).with_context(|| format!("k={k} {dtype:?}"))?;
        }
        if dev.is_cuda() {
            // Most rows follow an alike row in their block: the carried bin must hold for some.
            let got = profk::topk(&x, 64, &TopKOptions::default())?;
            ensure!(
                got.stats.read_once > rows as u64 / 4 && got.stats.read_once < rows as u64,
                "{dtype:?}: {} of {rows} rows read once",
                got.stats.read_once
            );
            // A row is read once to four times: guess, lowered guess, full histogram, compaction.
            let s = &got.stats;
            ensure!(
                s.row_reads > rows as u64 && (2..=4).contains(&s.row_reads_most),
                "{dtype:?}: {} reads of {rows} rows, at most {}",
                s.row_reads,
                s.row_reads_most
            );
        }
    }
    let (rows, n) = (1100, 1500);
    let x = tensor(&normal(rows * n, 12), &[rows, n], DType::F32, dev)?;
    for k in [1024, 1025] {
        check_all(&x, k, NanPolicy::Error).with_context(|| format!("k={k}"))?;
    }
    Ok(())
}

/// NaN is an error naming the count and the first flat index, with rows of the kernel's shapes.
pub fn nan_error(dev: &Device) -> Result<()> {
    let n = 3001;
    let mut data = normal(4 * n, 9);
    for i in [2 * n + 5, 2 * n + 9, 3 * n] {
        data[i] = f64::NAN;
    }
    for dtype in DTYPES {
        let x = tensor(&data, &[4, n], dtype, dev)?;
        match profk::topk(&x, 3, &TopKOptions::default()) {
            Err(profk::Error::NaN { count: 3, first }) if first == 2 * n + 5 => {}
            other => anyhow::bail!(
                "{dtype:?}: expected 3 NaN from {}, got {other:?}",
                2 * n + 5
            ),
        }
    }
    Ok(())
}

test_device!(random_rows, super::random_rows);
test_device!(adversarial_rows, super::adversarial_rows);
test_device!(ties_to_the_lowest_index, super::ties_to_the_lowest_index);
test_device!(many_long_rows, super::many_long_rows);
test_device!(nan_error, super::nan_error);
test_device!(carried_thresholds, super::carried_thresholds);
test_device!(long_rows_large_k, super::long_rows_large_k);
