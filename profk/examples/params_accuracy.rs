//! Accuracy and speed of the hypergeometric distribution function behind the Prof-K parameters,
//! against statrs and a product-form reference, then the exact and fast parameters side by side.
//!
//! `cargo run --release -p profk --example params_accuracy`

use std::time::Instant;

use profk::params::{self, Hypergeometric, Method};
use statrs::distribution::{DiscreteCDF, Hypergeometric as StatrsHypergeometric};

#[path = "../tests/support/hypergeometric.rs"]
mod hypergeometric;
use hypergeometric::{ln_sum_exp, reference_ln_pmfs};

/// Mean seconds per call of `f`, repeated until 0.2 s have passed (at least 3 calls).
fn time_per_call<T>(mut f: impl FnMut() -> T) -> f64 {
    let start = Instant::now();
    let mut calls = 0u32;
    while calls < 3 || start.elapsed().as_secs_f64() < 0.2 {
        std::hint::black_box(f());
        calls += 1;
    }
    start.elapsed().as_secs_f64() / f64::from(calls)
}

fn relative_error(value: f64, reference: f64) -> f64 {
    ((value - reference) / reference).abs()
}

fn distribution_function_table() {
    println!(
        "## Pr(X < t) for X ~ Hypergeometric(N, K, S): relative error against the reference\n"
    );
    println!(
        "| N | K | S | t | Pr(X < t) | ours rel. err | statrs rel. err | ours µs | statrs µs |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    // Cut points in the lower tail (where Theorem 4 compares against ε/2) and in the bulk.
    let cases: [(u64, u64, u64, f64); 8] = [
        (1 << 20, 1 << 10, 1 << 14, -3.0),
        (1 << 26, 1 << 20, 1 << 14, -3.0),
        (1 << 30, 1 << 22, 1 << 16, -3.3),
        (1 << 30, 1 << 22, 1 << 16, 0.0),
        (1 << 33, 1 << 20, 1 << 18, -3.3),
        (1 << 33, 1 << 26, 1 << 18, -3.3),
        (1 << 33, 1 << 26, 1 << 18, 0.0),
        (1 << 33, 1 << 30, 1 << 18, -3.3),
    ];
    for (n, k, s, z) in cases {
        let mean = k as f64 * s as f64 / n as f64;
        let t = (mean + z * mean.sqrt()).round().max(1.0) as u64;
        let reference = reference_ln_pmfs(n, k, s);
        let expected = ln_sum_exp(&reference[..t as usize]).exp();
        let ours = Hypergeometric::new(n, k, s).expect("valid");
        let theirs = StatrsHypergeometric::new(n, k, s).expect("valid");
        let ours_value = ours.prob_below(t);
        let theirs_value = theirs.cdf(t - 1);
        let ours_time = time_per_call(|| ours.prob_below(t));
        let theirs_time = time_per_call(|| theirs.cdf(t - 1));
        println!(
            "| 2^{} | 2^{} | 2^{} | {t} | {expected:.4e} | {:.1e} | {:.1e} | {:.2} | {:.1} |",
            n.ilog2(),
            k.ilog2(),
            s.ilog2(),
            relative_error(ours_value, expected),
            relative_error(theirs_value, expected),
            ours_time * 1e6,
            theirs_time * 1e6,
        );
    }
    println!();
}

/// t* and M* of Theorem 4 by binary search on statrs' distribution function, for comparison.
fn exact_with_statrs(n: u64, k: u64, s: u64, budget: f64) -> (u64, u64) {
    let top = StatrsHypergeometric::new(n, k - 1, s).expect("valid");
    let t = params::partition_point(1, s, |t| top.sf(t - 1) <= budget);
    let m = params::partition_point(k, n, |m| {
        StatrsHypergeometric::new(n, m, s)
            .expect("valid")
            .cdf(t - 1)
            <= budget
    });
    (t, m)
}

fn exact_speed_table() {
    println!("## Uncached exact parameters (Theorem 4): time per computation\n");
    println!("| N | k | S | t* | M* | ours ms | statrs-based ms | statrs t*, M* |");
    println!("|---|---|---|---|---|---|---|---|");
    let eps = 1e-3;
    for (n, k, s) in [
        (1u64 << 20, 1u64 << 5, 1u64 << 14),
        (1 << 26, 1 << 14, 1 << 14),
        (1 << 30, 1 << 10, 1 << 16),
        (1 << 33, 1 << 20, 1 << 18),
        (1 << 33, 1 << 30, 1 << 18),
    ] {
        let p = params::exact(n, k, eps, Some(s)).expect("valid");
        let ours = time_per_call(|| params::exact(n, k, eps, Some(s)));
        // statrs is slow at large N: time one run only.
        let start = Instant::now();
        let (t, m) = exact_with_statrs(n, k, s, eps / 2.0);
        let theirs = start.elapsed().as_secs_f64();
        println!(
            "| 2^{} | 2^{} | 2^{} | {} | {} | {:.3} | {:.1} | {t}, {m} |",
            n.ilog2(),
            k.ilog2(),
            s.ilog2(),
            p.t,
            p.capacity,
            ours * 1e3,
            theirs * 1e3,
        );
    }
    println!();
}

fn fast_against_exact_table() {
    println!(
        "## Algorithm 1 against Theorem 4 (ε = 1e-3, sample size of Proposition 7 for both)\n"
    );
    println!("| N | k | S | t* | t fast | M* | M fast | excess | Pr(fail) exact | Pr(fail) fast |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let eps = 1e-3;
    let grid = [
        (20, 5),
        (20, 8),
        (20, 11),
        (20, 14),
        (22, 8),
        (22, 14),
        (24, 5),
        (24, 11),
        (24, 17),
        (26, 8),
        (26, 14),
        (26, 20),
        (28, 5),
        (28, 11),
        (28, 17),
        (30, 8),
        (30, 14),
        (30, 20),
        (31, 5),
        (31, 14),
        (31, 20),
    ];
    for (log_n, log_k) in grid {
        let (n, k) = (1u64 << log_n, 1u64 << log_k);
        let exact = params::exact(n, k, eps, None).expect("valid");
        let fast = params::fast(n, k, eps, None).expect("valid");
        println!(
            "| 2^{log_n} | 2^{log_k} | {} | {} | {} | {} | {} | {:.2}% | {:.3e} | {:.3e} |",
            exact.sample,
            exact.t,
            fast.t,
            exact.capacity,
            fast.capacity,
            100.0 * (fast.capacity as f64 / exact.capacity as f64 - 1.0),
            exact.p_recall_fail + exact.p_overflow,
            fast.p_recall_fail + fast.p_overflow,
        );
    }
    println!();
}

fn memo_table() {
    println!("## Memoized parameters (`cached`): time per call\n");
    println!("| method | first call µs | later calls ns |");
    println!("|---|---|---|");
    for (method, name) in [(Method::Exact, "exact"), (Method::Fast, "fast")] {
        let (n, k, eps) = ((1u64 << 33) - 1, 1u64 << 20, 1e-3);
        let start = Instant::now();
        params::cached(n, k, eps, method).expect("valid");
        let first = start.elapsed().as_secs_f64();
        let later = time_per_call(|| params::cached(n, k, eps, method));
        println!("| {name} | {:.1} | {:.0} |", first * 1e6, later * 1e9);
    }
    println!();
}

fn main() {
    distribution_function_table();
    exact_speed_table();
    memo_table();
    fast_against_exact_table();
}
