//! Closed-form parameters: Algorithm 1 of the paper (Appendix B) and the sample-size rule of
//! Proposition 7. Elementary arithmetic only, so they can be recomputed on every call.

/// Per-element cost of sampling relative to selecting from the buffer, r(k) in Proposition 7.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CostRatio {
    /// 1/r(k) = slope · log2 k + intercept for k > 2^min_log2_k, and r = ∞ (buffer selection is
    /// free, the sample stays at its floor) where that is not positive or k is smaller.
    LogLinear {
        slope: f64,
        intercept: f64,
        min_log2_k: f64,
    },
    /// The same ratio for every k (∞ pins the sample to its floor).
    Constant(f64),
}

impl CostRatio {
    /// r(k); `f64::INFINITY` when the buffer selection costs nothing next to the sampling.
    pub fn ratio(&self, k: u64) -> f64 {
        match *self {
            CostRatio::LogLinear {
                slope,
                intercept,
                min_log2_k,
            } => {
                let log2_k = (k.max(1) as f64).log2();
                let inverse = slope * log2_k + intercept;
                if log2_k <= min_log2_k || inverse <= 0.0 {
                    f64::INFINITY
                } else {
                    1.0 / inverse
                }
            }
            CostRatio::Constant(r) => r,
        }
    }
}

/// The cost model behind the sample size: bounds on S and the calibrated cost ratio r(k).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostModel {
    /// Floor on S: below it the fixed cost of the threshold selection dominates and a smaller
    /// sample saves nothing.
    pub s_min: u64,
    /// Ceiling on S, keeping the sampling stage negligible against the scan.
    pub s_max: u64,
    /// S never exceeds N / min_n_per_sample: a sample that is a sizeable share of the input costs
    /// as much as the pass it is meant to shorten.
    pub min_n_per_sample: u64,
    /// Above this retained fraction k/N the top-t selection over the sample dominates, and S stays
    /// at its floor.
    pub max_dense_fraction: f64,
    /// r(k).
    pub ratio: CostRatio,
}

impl Default for CostModel {
    /// The calibration of Appendix E.1: S in [2^14, 2^18], at most N/32, 1/r(k) = 0.59 log2 k − 4.3
    /// for k > 2^7, r = ∞ below, and the floor above k/N = 2^-10.
    fn default() -> Self {
        Self {
            s_min: 1 << 14,
            s_max: 1 << 18,
            min_n_per_sample: 32,
            max_dense_fraction: 1.0 / 1024.0,
            ratio: CostRatio::LogLinear {
                slope: 0.59,
                intercept: -4.3,
                min_log2_k: 7.0,
            },
        }
    }
}

/// Sample size of Proposition 7, clip(⌊max(S1, S2)⌋, S_min, S_max), then capped at N/min_n_per_sample
/// (at least 1) and at N.
pub fn sample_size(n: u64, k: u64, eps: f64, cost: &CostModel) -> u64 {
    let z = upper_normal_quantile(eps / 2.0);
    let r = cost.ratio.ratio(k);
    let floor = cost.s_min.min(cost.s_max);
    let rule = if r.is_finite() && r > 0.0 && (k as f64) <= cost.max_dense_fraction * n as f64 {
        let kappa = z * z + 0.5;
        let s1 = (z / r).powf(2.0 / 3.0) * ((k as f64) * (n as f64)).cbrt();
        let s2 = (kappa * n as f64 / r).sqrt();
        (s1.max(s2).floor() as u64).clamp(floor, cost.s_max.max(floor))
    } else {
        floor
    };
    let share_cap = (n / cost.min_n_per_sample.max(1)).max(1);
    rule.min(share_cap).min(n)
}

/// Threshold rank and buffer capacity of Algorithm 1 (lines 5–15) for a given S < N, k ≥ 1.
/// Neither is clamped here: t may exceed S and M may exceed N.
pub(super) fn surrogate_rank_and_capacity(n: u64, k: u64, s: u64, eps: f64) -> (u64, u64) {
    let z = upper_normal_quantile(eps / 2.0);
    let (nf, sf) = (n as f64, s as f64);
    let mu = (k - 1) as f64 * sf / nf;
    let t = if mu >= 15.0 {
        // Second-order Cornish–Fisher quantile with the skewness term bounded by one (Equation 10).
        let sigma = (mu * (1.0 - (k - 1) as f64 / nf) * (nf - sf) / (nf - 1.0)).sqrt();
        (mu + z * sigma + (z * z - 1.0) / 6.0).ceil() as u64 + 1
    } else {
        poisson_upper_quantile(mu, eps / 2.0) + 1
    };
    // Wilson–Hilferty quantile of (N+1)/(S+1) · Gamma(t, 1) (Equation 12).
    let h = 1.0 / (9.0 * t as f64);
    let cube = (1.0 - h + z * h.sqrt()).powi(3);
    let m = ((nf + 1.0) / (sf + 1.0) * t as f64 * cube).ceil();
    (t, m as u64)
}

/// Smallest j with Pr(Poisson(mu) ≤ j) ≥ 1 − tail (Equation 11), accumulating the terms by their
/// recurrence. Below a tail of 1e-10, 1 − tail keeps too few digits, and the stop is instead the
/// geometric bound Pr(X > j) ≤ p_{j+1} / (1 − mu/(j+2)), valid once j + 2 > mu.
fn poisson_upper_quantile(mu: f64, tail: f64) -> u64 {
    let mut p = (-mu).exp();
    let mut c = p;
    let mut j = 0u64;
    loop {
        let next = p * mu / (j + 1) as f64;
        let ratio_bound = mu / (j + 2) as f64;
        let done = if tail >= 1e-10 {
            c >= 1.0 - tail
        } else {
            ratio_bound < 1.0 && next / (1.0 - ratio_bound) <= tail
        };
        if done {
            return j;
        }
        j += 1;
        p = next;
        c += p;
    }
}

/// Φ^{-1}(1 − tail) by Acklam's rational approximation (relative error below 1.15e-9), evaluated
/// from the tail itself so that tiny tails keep their precision.
pub fn upper_normal_quantile(tail: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    const P_LOW: f64 = 0.02425;
    // Φ^{-1}(1 − p) = −Φ^{-1}(p).
    let lower = |p: f64| {
        if p < P_LOW {
            let q = (-2.0 * p.ln()).sqrt();
            (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
                / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
        } else if p <= 1.0 - P_LOW {
            let q = p - 0.5;
            let r = q * q;
            (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
                / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
        } else {
            let q = (-2.0 * (1.0 - p).ln()).sqrt();
            -(((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
                / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
        }
    };
    -lower(tail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_follows_appendix_e1() {
        let ratio = CostModel::default().ratio;
        assert!(ratio.ratio(1 << 7).is_infinite());
        assert!(ratio.ratio(150).is_infinite(), "1/r ≤ 0 just above 2^7");
        let r14 = ratio.ratio(1 << 14);
        assert!((1.0 / r14 - (0.59 * 14.0 - 4.3)).abs() < 1e-12);
    }

    #[test]
    fn poisson_quantile_of_zero_mean_is_zero() {
        assert_eq!(poisson_upper_quantile(0.0, 5e-4), 0);
    }

    #[test]
    fn poisson_quantile_terminates_below_double_precision() {
        // 1 − 1e-300 rounds to 1. Pr(Poisson(1) > j) ≈ e^-1/(j+1)! is 10^-298.4 at j = 165 and
        // 10^-300.6 at j = 166.
        assert_eq!(poisson_upper_quantile(1.0, 1e-300), 166);
        // A zero tail ends when the terms underflow.
        assert!(poisson_upper_quantile(1.0, 0.0) < 200);
    }

    #[test]
    fn poisson_quantile_matches_hand_values() {
        // Pr(Poisson(1) ≤ 4) = 0.99634 < 0.999 ≤ Pr(≤ 5) = 0.99941 < 0.9995 ≤ Pr(≤ 6) = 0.99992.
        assert_eq!(poisson_upper_quantile(1.0, 1e-3), 5);
        assert_eq!(poisson_upper_quantile(1.0, 5e-4), 6);
    }
}
