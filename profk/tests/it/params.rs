//! Prof-K parameters checked against values computed another way: exact integer pmf sums for small
//! N, a product-form pmf recurrence for large N, statrs where it is accurate, brute-force searches
//! for t* and M* (the `profk params` command line is tested beside the binary, tests/it/profk_cli.rs).

use profk::params::{
    self, cached, failure_probabilities, sample_size, CostModel, Hypergeometric, Method, Params,
};
use profk::Error;
use statrs::distribution::{ContinuousCDF, DiscreteCDF, Normal};

use crate::hypergeometric::{ln_sum_exp, reference_ln_pmfs};

/// Binomial coefficients C(n, j) for n ≤ 120, exact in u128 (C(120, 60) ≈ 9.7e34).
struct Pascal(Vec<Vec<u128>>);

impl Pascal {
    const MAX_N: usize = 120;

    fn new() -> Self {
        let mut rows: Vec<Vec<u128>> = vec![vec![1]];
        for n in 1..=Self::MAX_N {
            let prev = &rows[n - 1];
            let row = (0..=n)
                .map(|j| {
                    let left = if j > 0 { prev[j - 1] } else { 0 };
                    let right = if j < n { prev[j] } else { 0 };
                    left + right
                })
                .collect();
            rows.push(row);
        }
        Self(rows)
    }

    fn choose(&self, n: u64, j: u64) -> u128 {
        if j > n {
            0
        } else {
            self.0[n as usize][j as usize]
        }
    }

    /// Number of S-subsets of [N] with exactly j indices in a fixed K-set.
    fn count(&self, n: u64, k: u64, s: u64, j: u64) -> u128 {
        if j > k || j > s || s - j > n - k {
            return 0;
        }
        self.choose(k, j) * self.choose(n - k, s - j)
    }

    /// Exact (count of X < t, total count) for X ~ Hypergeometric(N, K, S).
    fn below(&self, n: u64, k: u64, s: u64, t: u64) -> (u128, u128) {
        let below = (0..t.min(s + 1)).map(|j| self.count(n, k, s, j)).sum();
        (below, self.choose(n, s))
    }
}

fn ratio((num, den): (u128, u128)) -> f64 {
    num as f64 / den as f64
}

fn assert_close(actual: f64, expected: f64, rel: f64, what: &str) {
    let scale = expected.abs().max(f64::MIN_POSITIVE);
    assert!(
        (actual - expected).abs() <= rel * scale,
        "{what}: {actual:e} vs expected {expected:e} (relative error {:e})",
        (actual - expected).abs() / scale
    );
}

#[test]
fn distribution_function_matches_exact_integer_sums() {
    let pascal = Pascal::new();
    let mut checked = 0;
    for n in [1u64, 2, 3, 7, 16, 31, 64, 97, 120] {
        let step = (n / 12).max(1);
        for k in (0..=n).step_by(step as usize).chain([n]) {
            for s in (0..=n).step_by(step as usize).chain([n]) {
                let dist = Hypergeometric::new(n, k, s).unwrap();
                for t in 0..=s + 1 {
                    let (below, total) = pascal.below(n, k, s, t);
                    let expected_below = ratio((below, total));
                    let expected_at_least = ratio((total - below, total));
                    let tails = dist.ln_tails(t);
                    let what = format!("N={n} K={k} S={s} t={t}");
                    assert_close(
                        tails.below(),
                        expected_below,
                        1e-12,
                        &format!("{what} below"),
                    );
                    assert_close(
                        tails.at_least(),
                        expected_at_least,
                        1e-12,
                        &format!("{what} at least"),
                    );
                    if t <= s {
                        let mass = ratio((pascal.count(n, k, s, t), total));
                        assert_close(dist.ln_pmf(t).exp(), mass, 1e-12, &format!("{what} pmf"));
                    }
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 10_000, "{checked}");
}

#[test]
fn distribution_function_matches_direct_pmf_sums_at_large_n() {
    let cases: [(u64, u64, u64); 7] = [
        (1 << 20, 1 << 10, 1 << 14),
        (1 << 26, 1 << 13, 1 << 14),
        (1 << 31, 1 << 20, 1 << 16),
        (1 << 33, 1 << 20, 1 << 18),
        (1 << 33, 3 << 31, 1 << 18),
        (1 << 33, 1 << 14, 1 << 18),
        (3_000_000_007, 1_000_000_000, 50_000),
    ];
    for (n, k, s) in cases {
        let reference = reference_ln_pmfs(n, k, s);
        let dist = Hypergeometric::new(n, k, s).unwrap();
        let mean = (k as f64 * s as f64 / n as f64) as u64;
        let sd = (mean as f64).sqrt() as u64 + 1;
        let cuts = [
            1,
            mean.saturating_sub(5 * sd),
            mean.saturating_sub(sd),
            mean,
            mean + sd,
            mean + 4 * sd,
            mean + 8 * sd,
        ];
        for t in cuts.into_iter().filter(|&t| t >= 1 && t <= s) {
            let what = format!("N={n} K={k} S={s} t={t}");
            let t_idx = t as usize;
            assert_close(
                dist.ln_pmf(t).exp(),
                reference[t_idx].exp(),
                1e-9,
                &format!("{what} pmf"),
            );
            let tails = dist.ln_tails(t);
            let ln_below = ln_sum_exp(&reference[..t_idx]);
            let ln_at_least = ln_sum_exp(&reference[t_idx..]);
            assert!(
                (tails.below - ln_below).abs() < 1e-9
                    && (tails.at_least - ln_at_least).abs() < 1e-9,
                "{what}: ln tails ({}, {}) vs reference ({ln_below}, {ln_at_least})",
                tails.below,
                tails.at_least
            );
        }
    }
}

#[test]
fn exact_optimum_at_large_n_holds_under_the_direct_reference() {
    // At N = 2^33 a relative error of 1e-5 in the distribution function (what ln-gamma differences
    // give there) moves M* by several units; the reference must see the same boundary.
    let budget = 5e-4;
    for (n, k, s) in [
        (1u64 << 33, 1u64 << 20, 1u64 << 18),
        (1 << 33, 1 << 30, 1 << 18),
    ] {
        let p = params::exact(n, k, 2.0 * budget, Some(s)).unwrap();
        let t = p.t as usize;
        let ln_overflow = |m: u64| ln_sum_exp(&reference_ln_pmfs(n, m, s)[..t]);
        let ln_recall = |t: usize| ln_sum_exp(&reference_ln_pmfs(n, k - 1, s)[t..]);
        let what = format!("{p:?}");
        assert!(ln_overflow(p.capacity) <= budget.ln(), "{what}");
        assert!(ln_overflow(p.capacity - 1) > budget.ln(), "{what}");
        assert!(ln_recall(t) <= budget.ln(), "{what}");
        assert!(ln_recall(t - 1) > budget.ln(), "{what}");
    }
}

#[test]
fn distribution_function_agrees_with_statrs_where_statrs_is_accurate() {
    // statrs forms ln C(n, j) from ln-gamma values of size n ln n, exact to ~1e-16 · n ln n; at
    // these populations that still leaves ≥ 10 correct digits in the lower tail it sums.
    for (n, k, s) in [
        (1000u64, 100u64, 200u64),
        (20_000, 50, 2_000),
        (100_000, 3_000, 1_000),
    ] {
        let ours = Hypergeometric::new(n, k, s).unwrap();
        let theirs = statrs::distribution::Hypergeometric::new(n, k, s).unwrap();
        let mean = k * s / n;
        for x in (0..=2 * mean + 10).step_by(((mean / 8).max(1)) as usize) {
            let expected = theirs.cdf(x);
            assert_close(
                ours.prob_below(x + 1),
                expected,
                1e-9,
                &format!("N={n} K={k} S={s} x={x}"),
            );
        }
    }
}

#[test]
fn normal_quantile_matches_statrs() {
    let normal = Normal::standard();
    for tail in [0.4, 0.1, 0.02425, 0.01, 5e-4, 1e-6, 1e-12] {
        // Φ^{-1}(1 − tail) = −Φ^{-1}(tail); forming 1 − tail would lose the digits of small tails.
        let expected = -normal.inverse_cdf(tail);
        assert_close(
            params::upper_normal_quantile(tail),
            expected,
            2e-9,
            &format!("tail {tail}"),
        );
    }
}

/// t* and M* by scanning every t and M with exact integer probabilities; `None` for the degenerate
/// case where no t ≤ S meets the recall budget, or when a comparison lies within 1e-9 of a tie
/// (floating-point evaluation may then legitimately decide either way).
fn brute_force(pascal: &Pascal, n: u64, k: u64, s: u64, eps: f64) -> Option<Option<(u64, u64)>> {
    let budget = eps / 2.0;
    let near_tie = |p: f64| (p - budget).abs() <= 1e-9 * budget;
    let mut t_star = None;
    for t in 1..=s {
        let (below, total) = pascal.below(n, k - 1, s, t);
        let p = ratio((total - below, total));
        if near_tie(p) {
            return None;
        }
        if p <= budget {
            t_star = Some(t);
            break;
        }
    }
    let Some(t) = t_star else {
        return Some(None);
    };
    for m in k..=n {
        let p = ratio(pascal.below(n, m, s, t));
        if near_tie(p) {
            return None;
        }
        if p <= budget {
            return Some(Some((t, m)));
        }
    }
    unreachable!("Pr(X_N < t) = 0 for t ≤ S");
}

#[test]
fn exact_parameters_match_brute_force_for_small_n() {
    let pascal = Pascal::new();
    let mut compared = 0;
    let mut degenerate = 0;
    for n in [1u64, 2, 5, 12, 30, 64, 90, 120] {
        for k in (1..=n).step_by((n as usize / 10).max(1)).chain([n - 1, n]) {
            if k == 0 {
                continue;
            }
            for s in [1, 2, 3, n / 4, n / 2, n - 1, n]
                .into_iter()
                .filter(|&s| s >= 1)
            {
                for eps in [0.5, 0.1, 1e-3] {
                    let params = params::exact(n, k, eps, Some(s)).unwrap();
                    let what = format!("N={n} k={k} S={s} eps={eps}: {params:?}");
                    match brute_force(&pascal, n, k, s, eps) {
                        None => continue,
                        Some(None) => {
                            assert!(params.is_full_selection(), "{what}");
                            degenerate += 1;
                        }
                        Some(Some(_)) if s == n => assert!(params.is_full_selection(), "{what}"),
                        Some(Some((t, m))) => {
                            assert_eq!(
                                (params.sample, params.t, params.capacity),
                                (s, t, m),
                                "{what}"
                            );
                            let (below, total) = pascal.below(n, k - 1, s, t);
                            let recall = ratio((total - below, total));
                            let overflow = ratio(pascal.below(n, m, s, t));
                            assert_close(params.p_recall_fail, recall, 1e-12, &what);
                            assert_close(params.p_overflow, overflow, 1e-12, &what);
                            compared += 1;
                        }
                    }
                }
            }
        }
    }
    eprintln!("{compared} compared with brute force, {degenerate} degenerate");
    assert!(
        compared > 500 && degenerate > 10,
        "{compared} compared, {degenerate} degenerate"
    );
}

/// The (N, k) grid of the paper's Table 3 range: N from 2^20 to 2^31, k from 2^5 to 2^20.
fn table3_grid() -> Vec<(u64, u64)> {
    let mut grid = Vec::new();
    for log_n in [20, 22, 24, 26, 28, 30, 31] {
        for log_k in [5, 8, 11, 14, 17, 20] {
            if log_k + 6 <= log_n {
                grid.push((1u64 << log_n, 1u64 << log_k));
            }
        }
    }
    grid
}

#[test]
fn exact_parameters_are_jointly_optimal() {
    let eps = 1e-3;
    let mut grid = table3_grid();
    grid.extend([
        (1 << 33, 1 << 10),
        (1 << 33, 1 << 20),
        (1 << 33, 1 << 30),
        (1 << 16, 1000),
    ]);
    for (n, k) in grid {
        let p = params::exact(n, k, eps, None).unwrap();
        let what = format!("{p:?}");
        assert!(
            !p.is_full_selection() && p.t >= 1 && p.t <= p.sample,
            "{what}"
        );
        assert!(p.capacity >= k && p.capacity <= n, "{what}");
        assert!(
            p.p_recall_fail <= eps / 2.0 && p.p_overflow <= eps / 2.0,
            "{what}"
        );
        assert_eq!(
            failure_probabilities(n, k, p.sample, p.t, p.capacity),
            (p.p_recall_fail, p.p_overflow)
        );
        if p.t > 1 {
            let (recall, _) = failure_probabilities(n, k, p.sample, p.t - 1, p.capacity);
            assert!(recall > eps / 2.0, "t* − 1 meets the recall budget: {what}");
        }
        if p.capacity > k {
            let (_, overflow) = failure_probabilities(n, k, p.sample, p.t, p.capacity - 1);
            assert!(
                overflow > eps / 2.0,
                "M* − 1 meets the overflow budget: {what}"
            );
        }
    }
}

#[test]
fn fast_parameters_are_conservative_and_close_to_exact() {
    let eps = 1e-3;
    for (n, k) in table3_grid() {
        let exact = params::exact(n, k, eps, None).unwrap();
        let fast = params::fast(n, k, eps, None).unwrap();
        let what = format!("exact {exact:?}\nfast  {fast:?}");
        assert_eq!(fast.sample, exact.sample, "{what}");
        assert!(fast.t >= exact.t && fast.t <= exact.t + 1, "{what}");
        assert!(fast.capacity >= exact.capacity, "{what}");
        assert!(
            fast.capacity as f64 <= 1.04 * exact.capacity as f64,
            "fast capacity more than 4% above M*: {what}"
        );
        assert!(fast.p_recall_fail + fast.p_overflow <= eps, "{what}");
        assert!(
            fast.p_overflow <= eps / 2.0 && fast.p_recall_fail <= eps / 2.0,
            "{what}"
        );
    }
}

#[test]
fn sample_size_follows_proposition_7() {
    let cost = CostModel::default();
    // Small k: r = ∞, the floor 2^14.
    assert_eq!(sample_size(1 << 26, 32, 1e-3, &cost), 1 << 14);
    // Dense selections stay at the floor too.
    assert_eq!(sample_size(1 << 20, 1 << 12, 1e-3, &cost), 1 << 14);
    // Large k at large N reaches the ceiling 2^18.
    assert_eq!(sample_size(1 << 33, 1 << 20, 1e-3, &cost), 1 << 18);
    // In between, max(S1, S2) by hand: N = 2^30, k = 2^14, 1/r = 0.59·14 − 4.3 = 3.96.
    let z = params::upper_normal_quantile(5e-4);
    let r = 1.0 / 3.96;
    let s1 = (z / r).powf(2.0 / 3.0) * ((1u64 << 44) as f64).cbrt();
    let s2 = ((z * z + 0.5) * (1u64 << 30) as f64 / r).sqrt();
    let expected = (s1.max(s2).floor() as u64).clamp(1 << 14, 1 << 18);
    assert!(expected > 1 << 14 && expected < 1 << 18, "{expected}");
    assert_eq!(sample_size(1 << 30, 1 << 14, 1e-3, &cost), expected);
    // Small inputs: at most N/32, and never above N.
    assert_eq!(sample_size(1 << 16, 8, 1e-3, &cost), 1 << 11);
    assert_eq!(sample_size(10, 3, 1e-3, &cost), 1);
    assert_eq!(sample_size(0, 0, 1e-3, &cost), 0);
    // An overridden ratio moves the rule.
    let costly_buffer = CostModel {
        ratio: params::CostRatio::Constant(0.01),
        ..cost
    };
    assert_eq!(sample_size(1 << 30, 1 << 10, 1e-3, &costly_buffer), 1 << 18);
}

#[test]
fn edge_cases_are_well_defined() {
    for method in [params::exact, params::fast] {
        let none = method(1000, 0, 1e-3, None).unwrap();
        assert_eq!((none.sample, none.t, none.capacity), (0, 0, 0));
        assert_eq!((none.p_recall_fail, none.p_overflow), (0.0, 0.0));
        assert_eq!(method(0, 0, 1e-3, None).unwrap().k, 0);

        let all = method(1000, 1000, 1e-3, None).unwrap();
        assert!(all.is_full_selection());
        assert_eq!((all.sample, all.t, all.capacity), (1000, 1000, 1000));

        let oversampled = method(1000, 10, 1e-3, Some(5000)).unwrap();
        assert_eq!(
            (oversampled.sample, oversampled.t, oversampled.capacity),
            (1000, 10, 10)
        );
        assert_eq!(failure_probabilities(1000, 10, 1000, 10, 10), (0.0, 0.0));

        let one = method(1, 1, 1e-3, None).unwrap();
        assert_eq!((one.sample, one.t, one.capacity), (1, 1, 1));

        // k = 1: the sample maximum never exceeds the global maximum, so t = 1 recalls surely.
        let max = method(1 << 24, 1, 1e-3, None).unwrap();
        assert_eq!((max.t, max.p_recall_fail), (1, 0.0));

        // Tiny samples that cannot meet the recall budget fall back to the whole input.
        assert!(method(100, 90, 1e-3, Some(3)).unwrap().is_full_selection());
    }
}

#[test]
fn invalid_arguments_are_param_errors() {
    for method in [params::exact, params::fast] {
        for eps in [0.0, 1.0, -0.1, f64::NAN, f64::INFINITY] {
            let err = method(100, 10, eps, None).unwrap_err();
            assert!(
                matches!(err, Error::Param(ref m) if m.contains("eps")),
                "{err}"
            );
        }
        let err = method(10, 11, 1e-3, None).unwrap_err();
        assert!(
            matches!(err, Error::Param(ref m) if m.contains("k = 11") && m.contains("10")),
            "{err}"
        );
        let err = method(10, 3, 1e-3, Some(0)).unwrap_err();
        assert!(
            matches!(err, Error::Param(ref m) if m.contains("sample")),
            "{err}"
        );
    }
    assert!(cached(5, 6, 1e-3, Method::Exact).is_err());
}

#[test]
fn failure_probabilities_follow_the_formulas_out_of_range() {
    let n = 1 << 20;
    assert_eq!(failure_probabilities(n, 0, 100, 3, 10), (0.0, 0.0));
    // t = 0: no threshold, nothing passes.
    assert_eq!(failure_probabilities(n, 5, 100, 0, 10), (1.0, 0.0));
    // t > S: every element passes.
    assert_eq!(failure_probabilities(n, 5, 100, 101, 10), (0.0, 1.0));
    // M ≥ N never overflows.
    assert_eq!(failure_probabilities(n, 5, 100, 3, n + 7).1, 0.0);
}

#[test]
fn cached_parameters_equal_fresh_ones_across_threads() {
    let configs = [
        (1u64 << 24, 64u64, 1e-3),
        (1 << 28, 1 << 14, 1e-4),
        (12_345, 678, 0.05),
    ];
    let handles: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                configs
                    .iter()
                    .flat_map(|&(n, k, eps)| {
                        [Method::Exact, Method::Fast].map(|m| cached(n, k, eps, m).unwrap())
                    })
                    .collect::<Vec<Params>>()
            })
        })
        .collect();
    let expected: Vec<Params> = configs
        .iter()
        .flat_map(|&(n, k, eps)| {
            [
                params::exact(n, k, eps, None).unwrap(),
                params::fast(n, k, eps, None).unwrap(),
            ]
        })
        .collect();
    for handle in handles {
        assert_eq!(handle.join().unwrap(), expected);
    }
}
