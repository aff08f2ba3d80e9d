//! Stages 1 and 2: a uniform sample without replacement and the threshold it gives.

use super::rank::{rank_order, Candidate};
use crate::select::key::Element;
use rand::distr::{Distribution, Uniform};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The threshold: the `t`-th largest sampled element in the ranking order. An element passes the
/// filter when it ranks at or above it, so the number that pass is exactly the threshold's rank R.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Threshold<K> {
    pub key: K,
    pub index: u64,
}

/// Why no threshold came out of the sample.
#[derive(Debug, PartialEq, Eq)]
pub struct SampledNan;

/// The random stream of one attempt on one row. Every (seed, row, attempt) has its own stream, so a
/// redraw never repeats the sample that failed.
pub fn stream(seed: u64, row: u64, attempt: u32) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ row.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    rng.set_stream(u64::from(attempt));
    rng
}

/// Rows up to this length deduplicate the sample with a bitmap (n / 8 bytes) instead of a sort.
const BITMAP_MAX_N: u64 = 1 << 22;

/// `sample` distinct indices of `0..n`, every subset equally likely.
///
/// Short rows draw uniform indices and keep each one not seen before (a bitmap remembers them):
/// sequential sampling without replacement. Long rows draw the missing count of uniform indices, merge
/// them in and drop repeats until none is missing; each round is symmetric under any relabelling of
/// `0..n` and the stop depends only on the count, so the final set is uniform among all sets of its
/// size, and it comes out sorted, which turns the gather into a forward sweep. Dense samples use
/// `rand`'s exact sampler.
pub fn draw(rng: &mut ChaCha8Rng, n: u64, sample: u64) -> Vec<u64> {
    assert!(sample <= n, "sample of {sample} from {n}");
    if sample.saturating_mul(8) > n {
        return rand::seq::index::sample(rng, n as usize, sample as usize)
            .into_iter()
            .map(|i| i as u64)
            .collect();
    }
    let uniform = Uniform::new(0, n).expect("a sparse sample has n > 0");
    let mut idx: Vec<u64> = Vec::with_capacity(sample as usize);
    if n <= BITMAP_MAX_N {
        let mut seen = vec![0u64; n.div_ceil(64) as usize];
        while (idx.len() as u64) < sample {
            let i = uniform.sample(rng);
            let (word, bit) = ((i / 64) as usize, 1u64 << (i % 64));
            if seen[word] & bit == 0 {
                seen[word] |= bit;
                idx.push(i);
            }
        }
        return idx;
    }
    while (idx.len() as u64) < sample {
        let missing = sample - idx.len() as u64;
        idx.extend((0..missing).map(|_| uniform.sample(rng)));
        idx.sort_unstable();
        idx.dedup();
    }
    idx
}

/// The `t`-th largest (1-based) sampled element. With `reject_nan`, a sampled NaN is reported instead.
pub fn threshold<T: Element, const MAG: bool>(
    row: &[T],
    sampled: &[u64],
    t: u64,
    reject_nan: bool,
) -> Result<Threshold<T::Key>, SampledNan> {
    assert!(
        t >= 1 && t as usize <= sampled.len(),
        "threshold rank {t} of {} samples",
        sampled.len()
    );
    let mut keyed: Vec<Candidate<T::Key>> = Vec::with_capacity(sampled.len());
    for &i in sampled {
        let x = row[i as usize];
        if reject_nan && x.is_nan_value() {
            return Err(SampledNan);
        }
        keyed.push((x.key::<MAG>(), i));
    }
    let (_, &mut (key, index), _) = keyed.select_nth_unstable_by(t as usize - 1, rank_order);
    Ok(Threshold { key, index })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_distinct_in_range_and_reproducible() {
        let a = draw(&mut stream(1, 0, 0), 1000, 200);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 200);
        assert!(*sorted.last().unwrap() < 1000);
        assert_eq!(a, draw(&mut stream(1, 0, 0), 1000, 200));
        assert_ne!(a, draw(&mut stream(1, 0, 1), 1000, 200));
        assert_ne!(a, draw(&mut stream(1, 1, 0), 1000, 200));
        let sparse = draw(&mut stream(2, 0, 0), 100, 12);
        assert!(sparse.len() == 12 && sparse.iter().all(|&i| i < 100));
        let long = draw(&mut stream(2, 0, 0), BITMAP_MAX_N + 1, 1000);
        assert!(long.len() == 1000 && long.windows(2).all(|w| w[0] < w[1]));
    }

    /// Sparse draws of 2 from 40: all 780 pairs occur, and each index is drawn with probability
    /// 1/20, so 20000 draws give 1000 ± 4σ (σ ≈ 30.8) per index.
    #[test]
    fn sparse_draws_are_uniform() {
        let mut pairs = std::collections::HashSet::new();
        let mut hits = [0u32; 40];
        let mut rng = stream(3, 0, 0);
        for _ in 0..20_000 {
            let mut d = draw(&mut rng, 40, 2);
            d.sort_unstable();
            hits[d[0] as usize] += 1;
            hits[d[1] as usize] += 1;
            pairs.insert(d);
        }
        assert_eq!(pairs.len(), 780);
        assert!(hits.iter().all(|&c| (876..=1124).contains(&c)), "{hits:?}");
    }

    #[test]
    fn threshold_breaks_ties_by_index() {
        let row = [1.0f32, 3.0, 3.0, 2.0, 3.0];
        let thr = threshold::<f32, false>(&row, &[0, 1, 2, 3, 4], 2, true).unwrap();
        assert_eq!(thr.index, 2);
        assert_eq!(
            threshold::<f32, false>(&[f32::NAN, 1.0], &[0, 1], 1, true),
            Err(SampledNan)
        );
    }
}
