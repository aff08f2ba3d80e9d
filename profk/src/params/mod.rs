//! Parameters of Prof-K: sample size S, threshold rank t and buffer capacity M for a failure budget ε.
//!
//! With the threshold at the t-th largest of S values sampled without replacement, R elements pass
//! the filter and the attempt succeeds when k ≤ R ≤ M. Both failure modes have exact, input-free
//! probabilities (Propositions 2 and 3 of the paper):
//! Pr(R < k) = Pr(X_{k−1} ≥ t) and Pr(R > M) = Pr(X_M < t), where X_K ~ Hypergeometric(N, K, S).
//! [`exact`] finds the smallest t and M meeting ε/2 each (Theorem 4), [`fast`] evaluates the
//! closed-form surrogates of Algorithm 1, and [`cached`] memoizes either per configuration.
//!
//! Degenerate configurations stay well defined: k = 0 gives all-zero parameters (nothing to select);
//! when S ≥ N, or no t ≤ S can meet the recall budget (k close to N, tiny S), the parameters are
//! `sample = n, t = k, capacity = k` — the whole input is the sample and the threshold is the k-th
//! value itself, which fails with probability zero.

mod fast;
pub mod hypergeometric;
mod memo;

use serde::Serialize;

use crate::error::{Error, Result};
pub use fast::{sample_size, upper_normal_quantile, CostModel, CostRatio};
pub use hypergeometric::Hypergeometric;
pub use memo::{cached, cached_with_sample};

/// Parameters of one Prof-K configuration and the exact probabilities of its two failure modes.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Params {
    /// Elements per selection.
    pub n: u64,
    /// Elements selected.
    pub k: u64,
    /// Failure budget the parameters were computed for (split ε/2 recall, ε/2 overflow).
    pub eps: f64,
    /// Sample size S; `sample == n` means the whole input is sorted.
    pub sample: u64,
    /// Threshold rank: the threshold is the t-th largest sampled value.
    pub t: u64,
    /// Buffer capacity M.
    pub capacity: u64,
    /// Pr(R < k): fewer than k elements pass the threshold.
    pub p_recall_fail: f64,
    /// Pr(R > M): more elements pass than the buffer holds.
    pub p_overflow: f64,
}

impl Params {
    /// True when the parameters ask for no sampling at all: select from the whole input.
    pub fn is_full_selection(&self) -> bool {
        self.k > 0 && self.sample >= self.n
    }

    fn nothing_to_select(n: u64, eps: f64) -> Self {
        Self {
            n,
            k: 0,
            eps,
            sample: 0,
            t: 0,
            capacity: 0,
            p_recall_fail: 0.0,
            p_overflow: 0.0,
        }
    }

    fn full_selection(n: u64, k: u64, eps: f64) -> Self {
        Self {
            n,
            k,
            eps,
            sample: n,
            t: k,
            capacity: k,
            p_recall_fail: 0.0,
            p_overflow: 0.0,
        }
    }

    fn with_failure_probabilities(n: u64, k: u64, eps: f64, sample: u64, t: u64, m: u64) -> Self {
        let (p_recall_fail, p_overflow) = failure_probabilities(n, k, sample, t, m);
        Self {
            n,
            k,
            eps,
            sample,
            t,
            capacity: m,
            p_recall_fail,
            p_overflow,
        }
    }
}

/// How the threshold rank and the capacity are computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    /// Theorem 4: the smallest t and M meeting ε/2 each, from the exact distribution function.
    Exact,
    /// Algorithm 1: Cornish–Fisher or Poisson t, Wilson–Hilferty M; conservative.
    Fast,
}

/// Exact optimal parameters of Theorem 4 with ε_A = ε_B = ε/2. `sample` overrides the sample size
/// of Proposition 7 (values above n mean n).
pub fn exact(n: u64, k: u64, eps: f64, sample: Option<u64>) -> Result<Params> {
    sampled(n, k, eps, sample, |s| {
        let budget = eps / 2.0;
        let t = optimal_threshold_rank(n, k, s, budget);
        (t <= s).then(|| (t, optimal_capacity(n, k, s, t, budget)))
    })
}

/// Parameters of Algorithm 1, with their exact failure probabilities. `sample` as in [`exact`].
pub fn fast(n: u64, k: u64, eps: f64, sample: Option<u64>) -> Result<Params> {
    sampled(n, k, eps, sample, |s| {
        let (t, m) = fast::surrogate_rank_and_capacity(n, k, s, eps);
        (t <= s).then_some((t, m.clamp(k, n)))
    })
}

/// The parameters with the threshold rank and capacity that `rank_and_capacity` gives for sample size
/// s, where None (a rank above s) and the cases with nothing to sample mean the full selection.
fn sampled(
    n: u64,
    k: u64,
    eps: f64,
    sample: Option<u64>,
    rank_and_capacity: impl FnOnce(u64) -> Option<(u64, u64)>,
) -> Result<Params> {
    validate(n, k, eps)?;
    if k == 0 {
        return Ok(Params::nothing_to_select(n, eps));
    }
    let s = resolve_sample(n, k, eps, sample)?;
    if s >= n {
        return Ok(Params::full_selection(n, k, eps));
    }
    Ok(match rank_and_capacity(s) {
        Some((t, m)) => Params::with_failure_probabilities(n, k, eps, s, t, m),
        None => Params::full_selection(n, k, eps),
    })
}

/// Exact (Pr(R < k), Pr(R > M)) for sample size s, threshold rank t and capacity m, for every input
/// of n distinct values. Out-of-range arguments follow the formulas: s and m are capped at n, t = 0
/// (no threshold) never recalls, t > s always does, k = 0 never fails.
pub fn failure_probabilities(n: u64, k: u64, s: u64, t: u64, m: u64) -> (f64, f64) {
    if k == 0 {
        return (0.0, 0.0);
    }
    let s = s.min(n);
    let recall = match Hypergeometric::new(n, k - 1, s) {
        Some(top_k_minus_1) => top_k_minus_1.prob_at_least(t),
        None => 1.0, // k > n: fewer than k elements exist.
    };
    let overflow = Hypergeometric::new(n, m.min(n), s).map_or(0.0, |top_m| top_m.prob_below(t));
    (recall, overflow)
}

/// Smallest t in [1, S] with Pr(X_{k−1} ≥ t) ≤ budget, or S + 1 if none (the tail is nonincreasing
/// in t and zero at S + 1).
fn optimal_threshold_rank(n: u64, k: u64, s: u64, budget: f64) -> u64 {
    let Some(top) = Hypergeometric::new(n, k - 1, s) else {
        return s + 1;
    };
    partition_point(1, s + 1, |t| top.prob_at_least(t) <= budget)
}

/// Smallest M in [k, N] with Pr(X_M < t) ≤ budget (nonincreasing in M, zero at M = N).
fn optimal_capacity(n: u64, k: u64, s: u64, t: u64, budget: f64) -> u64 {
    partition_point(k, n, |m| {
        Hypergeometric::new(n, m, s).is_some_and(|top| top.prob_below(t) <= budget)
    })
}

/// Smallest x in [lo, hi] with `ok(x)`, given that `ok` is monotone and `ok(hi)` holds.
pub fn partition_point(mut lo: u64, mut hi: u64, ok: impl Fn(u64) -> bool) -> u64 {
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if ok(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

fn validate(n: u64, k: u64, eps: f64) -> Result<()> {
    if !(eps > 0.0 && eps < 1.0) {
        return Err(Error::Param(format!(
            "failure budget eps = {eps} must lie strictly between 0 and 1"
        )));
    }
    if k > n {
        return Err(Error::Param(format!(
            "k = {k} exceeds the n = {n} elements to select from"
        )));
    }
    Ok(())
}

fn resolve_sample(n: u64, k: u64, eps: f64, sample: Option<u64>) -> Result<u64> {
    match sample {
        Some(0) => Err(Error::Param(
            "sample size 0 cannot give a threshold; pass at least 1 (or n to sort everything)"
                .into(),
        )),
        Some(s) => Ok(s.min(n)),
        None => Ok(sample_size(n, k, eps, &CostModel::default())),
    }
}
