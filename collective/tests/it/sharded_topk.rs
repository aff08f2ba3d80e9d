//! The sharded Prof-K on the thread double: with 1 to 4 ranks, in row and column blocks, the global
//! top-k equals a full sort of the whole matrix and the single-device selection, on random and
//! adversarial inputs, and through the redraw and fallback branches.

use collective::{AsExchange, ThreadCollective};
use profk::sharded::{self, Block, Sharded};
use profk::{NanPolicy, Order, Plan, TopKOptions, MAX_ATTEMPTS};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// How the global matrix is cut into blocks.
#[derive(Clone, Copy, Debug)]
enum Cut {
    /// Ranks hold whole rows (data-parallel).
    Rows,
    /// Ranks hold columns of every row (latent-sharded).
    Cols,
}

/// Uneven cut points of `len` into `world` parts; the second part is empty when `world > 2`.
fn split(len: u64, world: usize) -> Vec<(u64, u64)> {
    let mut bounds = vec![0u64];
    for r in 1..world {
        let b = if world > 2 && r == 2 {
            bounds[1] // rank 1 holds nothing
        } else {
            (len * r as u64 * r as u64 / (world * world) as u64).max(bounds[r - 1])
        };
        bounds.push(b);
    }
    bounds.push(len);
    bounds.windows(2).map(|w| (w[0], w[1] - w[0])).collect()
}

fn blocks(rows: u64, cols: u64, world: usize, cut: Cut) -> Vec<Block> {
    match cut {
        Cut::Rows => split(rows, world)
            .into_iter()
            .map(|(s, c)| Block::rows(rows, cols, s, c))
            .collect(),
        Cut::Cols => split(cols, world)
            .into_iter()
            .map(|(s, c)| Block::cols(rows, cols, s, c))
            .collect(),
    }
}

/// The block's elements of the row-major matrix `data`, row-major.
fn shard_of(data: &[f32], b: &Block) -> Vec<f32> {
    (b.row_start..b.row_start + b.row_count)
        .flat_map(|i| {
            let row = (i * b.cols + b.col_start) as usize;
            data[row..row + b.col_count as usize].iter().copied()
        })
        .collect()
}

/// Ranking key of the reference: NaN above +inf, the two zeros equal.
fn key(x: f32, by_magnitude: bool) -> (u8, f32) {
    let x = if by_magnitude { x.abs() } else { x };
    if x.is_nan() {
        (1, 0.0)
    } else {
        (0, if x == 0.0 { 0.0 } else { x })
    }
}

/// Indices of the top k by a full sort: larger key first, ties by lower index.
fn reference(data: &[f32], k: usize, by_magnitude: bool, order: Order) -> Vec<u64> {
    let mut idx: Vec<u64> = (0..data.len() as u64).collect();
    idx.sort_by(|&a, &b| {
        let (ka, kb) = (
            key(data[a as usize], by_magnitude),
            key(data[b as usize], by_magnitude),
        );
        kb.0.cmp(&ka.0).then(kb.1.total_cmp(&ka.1)).then(a.cmp(&b))
    });
    idx.truncate(k);
    if order == Order::Index {
        idx.sort_unstable();
    }
    idx
}

/// A row-major `rows × cols` matrix of scores.
struct Matrix<'a> {
    data: &'a [f32],
    rows: u64,
    cols: u64,
}

/// The sharded selection on `world` threads, with the given plan or the default one; every rank's
/// answer.
fn sharded_run(
    m: &Matrix,
    world: usize,
    cut: Cut,
    k: usize,
    opts: &TopKOptions,
    plan: Option<Plan>,
) -> Vec<profk::Result<Sharded<f32>>> {
    let blocks = blocks(m.rows, m.cols, world, cut);
    ThreadCollective::run(world, |c| {
        let b = blocks[collective::Collective::rank(&c)];
        let shard = shard_of(m.data, &b);
        match plan {
            None => sharded::topk(c.as_exchange(), &shard, b, k, opts),
            Some(p) => sharded::topk_with_plan(c.as_exchange(), &shard, b, k, opts, Some(p)),
        }
    })
}

/// Every rank's selection equals the full sort's, carries the right values, and each rank's share
/// is the part of the selection its block holds. Returns whether the plan sampled (else the exact
/// local top-k were gathered).
fn check_case(
    name: &str,
    data: &[f32],
    rows: u64,
    cols: u64,
    k: usize,
    opts: &TopKOptions,
) -> bool {
    let expect = reference(data, k, opts.by_magnitude, opts.order);
    let mut sampled = false;
    for world in 1..=4 {
        for cut in [Cut::Rows, Cut::Cols] {
            let blocks = blocks(rows, cols, world, cut);
            let m = Matrix { data, rows, cols };
            let out = sharded_run(&m, world, cut, k, opts, None);
            for (r, got) in out.into_iter().enumerate() {
                let got = got.unwrap_or_else(|e| panic!("{name}, {world} ranks, {cut:?}: {e}"));
                sampled = got.stats.sample > 0;
                assert_eq!(
                    got.indices, expect,
                    "{name}, {world} ranks, {cut:?}, rank {r}"
                );
                for (&g, &v) in got.indices.iter().zip(&got.values) {
                    assert_eq!(
                        v.to_bits(),
                        data[g as usize].to_bits(),
                        "{name}: value of {g}"
                    );
                }
                let own = got.own(&blocks[r]);
                let shard = shard_of(data, &blocks[r]);
                for &(pos, l) in &own {
                    assert_eq!(blocks[r].global(l), got.indices[pos]);
                    assert_eq!(shard[l as usize].to_bits(), got.values[pos].to_bits());
                }
                let held = expect
                    .iter()
                    .filter(|&&g| blocks[r].local(g).is_some())
                    .count();
                assert_eq!(own.len(), held, "{name}: rank {r}'s share");
            }
        }
    }
    sampled
}

fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(-4.0f32..4.0)).collect()
}

const ROWS: u64 = 16;
const COLS: u64 = 600;

#[test]
fn random_scores_equal_the_full_sort_and_the_single_device_selection() {
    let data = random((ROWS * COLS) as usize, 1);
    let opts = TopKOptions::default();
    for k in [1, 37, 500] {
        assert!(
            check_case("random", &data, ROWS, COLS, k, &opts),
            "k = {k} did not sample"
        );
    }
    let by_index = TopKOptions {
        order: Order::Index,
        by_magnitude: true,
        seed: 99,
        ..TopKOptions::default()
    };
    assert!(check_case(
        "random by magnitude",
        &data,
        ROWS,
        COLS,
        300,
        &by_index
    ));
    // The single-device selection of the flat matrix agrees.
    let x =
        candle_core::Tensor::from_vec(data.clone(), data.len(), &candle_core::Device::Cpu).unwrap();
    let single = profk::topk(&x, 500, &opts).unwrap();
    let single: Vec<u64> = single
        .indices
        .to_vec1::<i64>()
        .unwrap()
        .into_iter()
        .map(|i| i as u64)
        .collect();
    assert_eq!(single, reference(&data, 500, false, Order::Desc));
}

#[test]
fn adversarial_scores_equal_the_full_sort() {
    let n = (ROWS * COLS) as usize;
    let largest = TopKOptions {
        nan: NanPolicy::Largest,
        ..TopKOptions::default()
    };
    let equal = vec![0.5f32; n];
    let levels: Vec<f32> = (0..n).map(|i| [-1.0f32, 0.0, 2.0][(i * 7) % 3]).collect();
    let infinities: Vec<f32> = (0..n)
        .map(|i| match i % 5 {
            0 => f32::INFINITY,
            1 => f32::NEG_INFINITY,
            2 => 1.0,
            _ => -1.0,
        })
        .collect();
    let zeros: Vec<f32> = (0..n)
        .map(|i| if i % 2 == 0 { -0.0 } else { 0.0 })
        .collect();
    let mut nans = random(n, 3);
    for i in (5..n).step_by(997) {
        nans[i] = f32::NAN;
    }
    for (name, data) in [
        ("all equal", &equal),
        ("three levels", &levels),
        ("infinities", &infinities),
        ("signed zeros", &zeros),
        ("NaN largest", &nans),
    ] {
        for k in [1, 64, 1000] {
            assert!(
                check_case(name, data, ROWS, COLS, k, &largest),
                "{name}: k = {k}"
            );
        }
    }
    // k = n selects everything, without sampling; k = 0 nothing.
    assert!(!check_case("k = n", &levels, ROWS, COLS, n, &largest));
    check_case("k = 0", &levels, ROWS, COLS, 0, &largest);
    // A single flat list, as in gradient sparsification.
    assert!(check_case(
        "one row",
        &random(5000, 4),
        1,
        5000,
        50,
        &largest
    ));
}

#[test]
fn a_nan_under_the_error_policy_fails_every_rank_naming_the_first() {
    let mut data = random((ROWS * COLS) as usize, 5);
    data[4321] = f32::NAN;
    data[7000] = f32::NAN;
    for world in [1, 3] {
        let m = Matrix {
            data: &data,
            rows: ROWS,
            cols: COLS,
        };
        let out = sharded_run(&m, world, Cut::Cols, 40, &TopKOptions::default(), None);
        for got in out {
            match got {
                Err(profk::Error::NaN { count, first }) => assert_eq!((count, first), (2, 4321)),
                other => panic!("{world} ranks: {other:?}"),
            }
        }
    }
}

/// A capacity below every possible R overflows every attempt; a threshold rank of 1 recalls too few
/// on every attempt: both end in the gathered local top-k, exact.
#[test]
fn every_attempt_failing_falls_back_to_the_exact_local_tops() {
    let data = random((ROWS * COLS) as usize, 6);
    let k = 100;
    let expect = reference(&data, k, false, Order::Desc);
    let overflow = Plan {
        sample: 400,
        t: 300,
        capacity: k as u64,
    };
    let recall = Plan {
        sample: 400,
        t: 1,
        capacity: 5000,
    };
    for (plan, overflows, recalls) in [(overflow, MAX_ATTEMPTS, 0), (recall, 0, MAX_ATTEMPTS)] {
        for world in [1, 2, 4] {
            let m = Matrix {
                data: &data,
                rows: ROWS,
                cols: COLS,
            };
            let out = sharded_run(&m, world, Cut::Rows, k, &TopKOptions::default(), Some(plan));
            for got in out {
                let got = got.unwrap();
                assert_eq!(got.indices, expect);
                let s = &got.stats;
                assert!(s.fell_back && s.attempts == MAX_ATTEMPTS, "{s:?}");
                assert_eq!((s.overflows, s.recall_failures), (overflows, recalls));
            }
        }
    }
}

/// With failures frequent (S = 64, ε = 0.4), the first seed whose first attempt fails is found, and
/// the redraw that follows on every rank still gives the exact answer.
#[test]
fn a_failed_first_attempt_is_redrawn_and_exact() {
    let data = random((ROWS * COLS) as usize, 7);
    let k = 200;
    let p = profk::params::exact(ROWS * COLS, k as u64, 0.4, Some(64)).unwrap();
    assert!(p.p_recall_fail + p.p_overflow > 0.1, "{p:?}");
    let expect = reference(&data, k, false, Order::Desc);
    let m = Matrix {
        data: &data,
        rows: ROWS,
        cols: COLS,
    };
    let redrawn = (0..200u64).find_map(|seed| {
        let opts = TopKOptions {
            seed,
            ..TopKOptions::default()
        };
        let out = sharded_run(&m, 3, Cut::Cols, k, &opts, Some(p.into()));
        let first = out.into_iter().next()?.ok()?;
        (first.stats.attempts > 1 && !first.stats.fell_back).then_some((seed, first))
    });
    let (seed, got) = redrawn.expect("a seed whose first attempt fails");
    assert_eq!(got.indices, expect, "seed {seed}");
    // Every rank took the same branch.
    let opts = TopKOptions {
        seed,
        ..TopKOptions::default()
    };
    for r in sharded_run(&m, 3, Cut::Cols, k, &opts, Some(p.into())) {
        assert_eq!(r.unwrap().stats.attempts, got.stats.attempts);
    }
}

#[test]
fn blocks_that_do_not_tile_the_matrix_fail_on_every_rank() {
    let data = random(100, 8);
    let out = ThreadCollective::run(2, |c| {
        // Both ranks claim the first half.
        let b = Block::range(100, 0, 50);
        sharded::topk(c.as_exchange(), &data[..50], b, 5, &TopKOptions::default())
    });
    for got in out {
        let e = got.unwrap_err().to_string();
        assert!(
            e.contains("hold 100 elements") || e.contains("overlap"),
            "{e}"
        );
    }
}
