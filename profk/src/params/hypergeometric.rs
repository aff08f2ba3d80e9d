//! The hypergeometric distribution in log space, accurate for populations up to 2^53.
//!
//! `statrs` evaluates ln C(n, k) as a difference of ln-gamma values of size n ln n; at n = 2^33 these
//! are ≈ 2·10^11, so each probability mass loses about five significant digits to cancellation, and its
//! distribution function sums every term from zero, O(x) ln-gamma calls per evaluation. Here a single
//! mass is computed by Loader's saddle-point method (Stirling remainders plus the deviance `bd0`, no
//! large terms that cancel), and a tail is summed outward from it with the exact ratio of consecutive
//! masses until the terms stop mattering — always the smaller tail, so the complement is never formed
//! by subtracting from one. Cost: O(σ) terms in the bulk, a handful in the far tails.

use std::f64::consts::{LN_2, PI};

/// ln √(2π).
const LN_SQRT_2PI: f64 = 0.918_938_533_204_672_8;

/// Hypergeometric(N, K, S): distinguished items among S drawn without replacement from N items of
/// which K are distinguished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hypergeometric {
    population: u64,
    successes: u64,
    draws: u64,
}

/// Natural logs of the two tails at a cut point t: ln Pr(X < t) and ln Pr(X ≥ t).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LnTails {
    pub below: f64,
    pub at_least: f64,
}

impl LnTails {
    /// Pr(X < t).
    pub fn below(&self) -> f64 {
        self.below.exp()
    }

    /// Pr(X ≥ t).
    pub fn at_least(&self) -> f64 {
        self.at_least.exp()
    }
}

impl Hypergeometric {
    /// `None` when K > N or S > N.
    pub fn new(population: u64, successes: u64, draws: u64) -> Option<Self> {
        (successes <= population && draws <= population).then_some(Self {
            population,
            successes,
            draws,
        })
    }

    /// Smallest and largest values with positive mass: max(0, S − (N − K)) and min(K, S).
    pub fn support(&self) -> (u64, u64) {
        let failures = self.population - self.successes;
        (
            self.draws.saturating_sub(failures),
            self.successes.min(self.draws),
        )
    }

    /// ln Pr(X = j); −∞ outside the support.
    pub fn ln_pmf(&self, j: u64) -> f64 {
        let (lo, hi) = self.support();
        if j < lo || j > hi {
            return f64::NEG_INFINITY;
        }
        if lo == hi {
            // One point of mass (K ∈ {0, N} or S ∈ {0, N}), where p or q below is zero.
            return 0.0;
        }
        let n = self.population as f64;
        let r = self.successes as f64;
        let b = n - r;
        let s = self.draws as f64;
        let x = j as f64;
        let p = s / n;
        let q = (n - s) / n;
        ln_binomial_pmf(x, r, p, q) + ln_binomial_pmf(s - x, b, p, q) - ln_binomial_pmf(s, n, p, q)
    }

    /// Both tails at t, the smaller one summed directly and the larger one as its complement.
    pub fn ln_tails(&self, t: u64) -> LnTails {
        let (lo, hi) = self.support();
        if t <= lo {
            return LnTails {
                below: f64::NEG_INFINITY,
                at_least: 0.0,
            };
        }
        if t > hi {
            return LnTails {
                below: 0.0,
                at_least: f64::NEG_INFINITY,
            };
        }
        // Pr(X < t) = Pr(X ≤ t − 1) with lo ≤ t − 1 < hi. Sum whichever tail lies away from the
        // mean: the lower one when t − 1 is at most the mean K·S/N, the upper one otherwise.
        let x = t - 1;
        let below_mean = (x as u128) * (self.population as u128)
            <= (self.draws as u128) * (self.successes as u128);
        if below_mean {
            let below = self.ln_lower_tail(x);
            LnTails {
                below,
                at_least: ln_one_minus_exp(below),
            }
        } else {
            // X ≥ t ⟺ S − X ≤ S − t, and S − X ~ Hypergeometric(N, N − K, S).
            let mirrored = Self {
                population: self.population,
                successes: self.population - self.successes,
                draws: self.draws,
            };
            let at_least = mirrored.ln_lower_tail(self.draws - t);
            LnTails {
                below: ln_one_minus_exp(at_least),
                at_least,
            }
        }
    }

    /// Pr(X < t).
    pub fn prob_below(&self, t: u64) -> f64 {
        self.ln_tails(t).below()
    }

    /// Pr(X ≥ t).
    pub fn prob_at_least(&self, t: u64) -> f64 {
        self.ln_tails(t).at_least()
    }

    /// ln Pr(X ≤ x) for x in the support: ln Pr(X = x) + ln(1 + Σ_{i<x} Pr(X = i)/Pr(X = x)), the
    /// ratios accumulated downward until they no longer change the sum. Fast when x ≤ mean.
    fn ln_lower_tail(&self, x: u64) -> f64 {
        let (lo, _) = self.support();
        let r = self.successes as f64;
        let b = (self.population - self.successes) as f64;
        let s = self.draws as f64;
        let mut sum = 0.0f64;
        let mut term = 1.0f64;
        let mut i = x;
        while i > lo {
            let xi = i as f64;
            // Pr(X = i − 1) / Pr(X = i) = i (N − K − S + i) / ((S − i + 1)(K − i + 1)).
            term *= xi * (b - s + xi) / ((s - xi + 1.0) * (r - xi + 1.0));
            sum += term;
            if term < f64::EPSILON * sum {
                break;
            }
            i -= 1;
        }
        self.ln_pmf(x) + sum.ln_1p()
    }
}

/// ln(1 − e^a) for a ≤ 0, accurate at both ends.
fn ln_one_minus_exp(a: f64) -> f64 {
    if a > -LN_2 {
        (-a.exp_m1()).ln()
    } else {
        (-a.exp()).ln_1p()
    }
}

/// ln of the Binomial(n, p) mass at x (q = 1 − p given separately so it keeps its precision), by
/// Loader's saddle-point expansion: ln[n!/(x!(n−x)!)] and x ln p + (n−x) ln q are never formed
/// apart, only their small sum through the Stirling remainders and the deviances.
fn ln_binomial_pmf(x: f64, n: f64, p: f64, q: f64) -> f64 {
    if x == 0.0 {
        if n == 0.0 {
            return 0.0;
        }
        return if p < 0.1 {
            -bd0(n, n * q) - n * p
        } else {
            n * q.ln()
        };
    }
    if x == n {
        return if q < 0.1 {
            -bd0(n, n * p) - n * q
        } else {
            n * p.ln()
        };
    }
    let lc = stirling_remainder(n)
        - stirling_remainder(x)
        - stirling_remainder(n - x)
        - bd0(x, n * p)
        - bd0(n - x, n * q);
    let ln_f = (2.0 * PI).ln() + x.ln() + (-x / n).ln_1p();
    lc - 0.5 * ln_f
}

/// Deviance x ln(x/m) + m − x, by its series in v = (x − m)/(x + m) when x and m are close.
fn bd0(x: f64, m: f64) -> f64 {
    let d = x - m;
    if d.abs() < 0.1 * (x + m) {
        let v = d / (x + m);
        let mut s = d * v;
        let mut ej = 2.0 * x * v;
        let v2 = v * v;
        for j in 1..1000 {
            ej *= v2;
            let next = s + ej / f64::from(2 * j + 1);
            if next == s {
                return s;
            }
            s = next;
        }
        s
    } else {
        x * (x / m).ln() + m - x
    }
}

/// ln n! − [(n + ½) ln n − n + ln √(2π)] for integer n ≥ 1.
fn stirling_remainder(n: f64) -> f64 {
    const S0: f64 = 1.0 / 12.0;
    const S1: f64 = 1.0 / 360.0;
    const S2: f64 = 1.0 / 1260.0;
    const S3: f64 = 1.0 / 1680.0;
    const S4: f64 = 1.0 / 1188.0;
    if n <= 15.0 {
        // n! is exact in f64 up to 22!, so only one rounding enters ln n!.
        let factorial: f64 = (1..=n as u64).map(|i| i as f64).product();
        return factorial.ln() - (n + 0.5) * n.ln() + n - LN_SQRT_2PI;
    }
    let nn = n * n;
    if n > 500.0 {
        (S0 - S1 / nn) / n
    } else if n > 80.0 {
        (S0 - (S1 - S2 / nn) / nn) / n
    } else if n > 35.0 {
        (S0 - (S1 - (S2 - S3 / nn) / nn) / nn) / n
    } else {
        (S0 - (S1 - (S2 - (S3 - S4 / nn) / nn) / nn) / nn) / n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stirling_remainder_matches_its_series_at_the_switch() {
        // The exact formula at 15 and the five-term series agree to 1e-13 absolute.
        let n = 15.0f64;
        let factorial: f64 = (1..=15u64).map(|i| i as f64).product();
        let exact = factorial.ln() - (n + 0.5) * n.ln() + n - LN_SQRT_2PI;
        let nn = n * n;
        let series = (1.0 / 12.0
            - (1.0 / 360.0 - (1.0 / 1260.0 - (1.0 / 1680.0 - 1.0 / 1188.0 / nn) / nn) / nn) / nn)
            / n;
        assert!((exact - series).abs() < 1e-13, "{exact} vs {series}");
    }

    #[test]
    fn ln_one_minus_exp_is_accurate_at_both_ends() {
        assert!((ln_one_minus_exp(-1e-20) - (1e-20f64).ln()).abs() < 1e-12);
        assert!((ln_one_minus_exp(-50.0) + (-50.0f64).exp()).abs() < 1e-30);
    }
}
