//! Stages 1 and 2: a uniform sample without replacement and the threshold it gives.

use super::rank::{rank_order, Candidate};
use crate::select::key::Element;
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

/// `sample` distinct indices of `0..n`, every subset equally likely (Floyd's algorithm or rejection
/// sampling, both exact, chosen by `rand` from the sizes).
pub fn draw(rng: &mut ChaCha8Rng, n: u64, sample: u64) -> Vec<u64> {
    let mut idx: Vec<u64> = rand::seq::index::sample(rng, n as usize, sample as usize)
        .into_iter()
        .map(|i| i as u64)
        .collect();
    // Ascending order turns the gather into a forward sweep, which the prefetcher follows better.
    idx.sort_unstable();
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
        assert_eq!(a.len(), 200);
        assert!(a.windows(2).all(|w| w[0] < w[1]) && *a.last().unwrap() < 1000);
        assert_eq!(a, draw(&mut stream(1, 0, 0), 1000, 200));
        assert_ne!(a, draw(&mut stream(1, 0, 1), 1000, 200));
        assert_ne!(a, draw(&mut stream(1, 1, 0), 1000, 200));
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
