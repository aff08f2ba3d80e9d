//! Property tests: on random inputs every selector, with default or arbitrary Prof-K plans, returns
//! exactly what a full f64 sort returns.
use crate::common;

use candle_core::{DType, Device};
use common::{check_against_reference, tensor};
use profk::{Mode, NanPolicy, Order, Plan, Selector, TopKOptions};
use proptest::prelude::*;

/// Values with many ties, signed zeros, infinities, denormals and (when allowed) NaNs.
fn value(allow_nan: bool) -> impl Strategy<Value = f64> {
    let special = prop_oneof![
        Just(0.0),
        Just(-0.0),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(1e-40),
        Just(-3e-41),
        Just(6e-8),
        Just(1e-310),
    ];
    let nan = if allow_nan { 1 } else { 0 };
    prop_oneof![
        4 => (-3i32..3).prop_map(f64::from),
        4 => -1e3f64..1e3,
        2 => special,
        nan => Just(f64::NAN),
    ]
}

#[derive(Debug, Clone)]
struct Case {
    batch: Vec<usize>,
    n: usize,
    data: Vec<f64>,
    dtype: DType,
    k: usize,
    opts: TopKOptions,
    plan: Option<(u64, u64, u64)>,
}

fn case() -> impl Strategy<Value = Case> {
    let shape = (prop::collection::vec(1usize..4, 0..3), 1usize..120);
    let dtype = prop_oneof![
        Just(DType::F32),
        Just(DType::BF16),
        Just(DType::F16),
        Just(DType::F64)
    ];
    let selector = prop_oneof![
        Just(Selector::Profk),
        Just(Selector::Sort),
        Just(Selector::Select),
        Just(Selector::Radix)
    ];
    (
        shape,
        dtype,
        selector,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<u64>(),
    )
        .prop_flat_map(
            |((batch, n), dtype, selector, flat, index_order, by_magnitude, nan_largest, seed)| {
                let len = batch.iter().product::<usize>() * n;
                let row_n = if flat { len } else { n };
                let data = prop::collection::vec(value(nan_largest), len);
                let k = 0..=row_n;
                // An arbitrary plan: any 1 <= t <= S <= n and any capacity, good or bad.
                let plan = prop::option::of(
                    (1..=row_n as u64, 0.0..1.0f64, 1..=row_n as u64 + 2)
                        .prop_map(|(s, tf, m)| (s, 1 + ((s - 1) as f64 * tf) as u64, m)),
                );
                (data, k, plan).prop_map(move |(data, k, plan)| Case {
                    batch: batch.clone(),
                    n,
                    data,
                    dtype,
                    k,
                    opts: TopKOptions {
                        selector,
                        mode: if flat { Mode::Flat } else { Mode::Rowwise },
                        order: if index_order {
                            Order::Index
                        } else {
                            Order::Desc
                        },
                        nan: if nan_largest {
                            NanPolicy::Largest
                        } else {
                            NanPolicy::Error
                        },
                        by_magnitude,
                        seed,
                        ..TopKOptions::default()
                    },
                    plan: if selector == Selector::Profk {
                        plan
                    } else {
                        None
                    },
                })
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn every_selector_equals_the_full_sort(c in case()) {
        let mut shape = c.batch.clone();
        shape.push(c.n);
        let x = tensor(&c.data, &shape, c.dtype, &Device::Cpu).unwrap();
        let got = match c.plan {
            Some((sample, t, capacity)) => profk::topk_with_plan(&x, c.k, &c.opts, Plan { sample, t, capacity }),
            None => profk::topk(&x, c.k, &c.opts),
        };
        let got = got.map_err(|e| TestCaseError::fail(format!("{e}")))?;
        check_against_reference(&x, c.k, &c.opts, &got).map_err(|e| TestCaseError::fail(format!("{e:#}")))?;
    }

    /// Long rows through the default plan (the sampling path), with few distinct values.
    #[test]
    fn long_rows_equal_the_full_sort(
        levels in 1u32..50,
        k in 0usize..300,
        seed in any::<u64>(),
        by_magnitude in any::<bool>(),
        index_order in any::<bool>(),
    ) {
        let n = profk::select::PROFK_MIN_N * 2 + 3;
        let data: Vec<f64> = common::small_ints(n, levels, seed).into_iter().map(|v| v - f64::from(levels / 2)).collect();
        let x = tensor(&data, &[n], DType::F32, &Device::Cpu).unwrap();
        let opts = TopKOptions {
            by_magnitude,
            order: if index_order { Order::Index } else { Order::Desc },
            seed,
            ..TopKOptions::default()
        };
        let got = profk::topk(&x, k, &opts).map_err(|e| TestCaseError::fail(format!("{e}")))?;
        check_against_reference(&x, k, &opts, &got).map_err(|e| TestCaseError::fail(format!("{e:#}")))?;
    }
}
