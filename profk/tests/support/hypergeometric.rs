//! The product-form reference for the hypergeometric distribution, shared by `tests/it/params.rs` and
//! `examples/params_accuracy.rs`: a computation independent of the saddle-point pmf under test.

/// Neumaier's compensated running sum: the reference adds up to 2^18 logarithms and must not lose
/// more than a few ulps doing so.
#[derive(Default)]
pub struct CompensatedSum {
    sum: f64,
    compensation: f64,
}

impl CompensatedSum {
    pub fn add(&mut self, x: f64) {
        let t = self.sum + x;
        self.compensation += if self.sum.abs() >= x.abs() {
            (self.sum - t) + x
        } else {
            (x - t) + self.sum
        };
        self.sum = t;
    }

    pub fn value(&self) -> f64 {
        self.sum + self.compensation
    }
}

/// ln Pr(X = j) for every j in 0..=S by the product form Pr(X = 0) = Π_{i<S} (N−K−i)/(N−i) and the
/// ratio of consecutive masses: a computation independent of the saddle-point pmf. Needs S ≤ N − K.
pub fn reference_ln_pmfs(n: u64, k: u64, s: u64) -> Vec<f64> {
    assert!(s <= n - k);
    let (nf, kf, sf) = (n as f64, k as f64, s as f64);
    let mut ln_p = CompensatedSum::default();
    for i in 0..s {
        ln_p.add((-kf / (nf - i as f64)).ln_1p());
    }
    let mut out = vec![ln_p.value()];
    for j in 0..s.min(k) {
        let jf = j as f64;
        // (K − j)(S − j) / ((j + 1)(N − K − S + j + 1)) as two factors, each exact to one rounding.
        ln_p.add(((kf - jf) / (jf + 1.0)).ln());
        ln_p.add(((sf - jf) / (nf - kf - sf + jf + 1.0)).ln());
        out.push(ln_p.value());
    }
    out.resize(s as usize + 1, f64::NEG_INFINITY);
    out
}

/// ln Σ exp(x) over a slice.
pub fn ln_sum_exp(xs: &[f64]) -> f64 {
    let max = xs.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    if max == f64::NEG_INFINITY {
        return max;
    }
    max + xs.iter().map(|x| (x - max).exp()).sum::<f64>().ln()
}
