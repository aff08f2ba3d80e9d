//! Exact selection by radix histograms over the keys (the approach of torch.topk), memory O(k).
//!
//! Each pass histograms 16 bits of the keys that still share the known high digits with the k-th
//! largest, which fixes those 16 bits of it. Once the k-th key is known, a last pass collects every
//! element above it and the lowest-index ties. This is the fallback of Prof-K after failed attempts and
//! the `radix` selector; it works for any row length, including N > 2^32.

use super::rank::Candidate;
use crate::select::key::{Element, KeyBits};
use rayon::prelude::*;

const DIGIT: u32 = 16;
const BINS: usize = 1 << DIGIT;
/// Elements per parallel task.
const CHUNK: usize = 1 << 20;

/// The exact top `k` of `row` (unordered), `1 <= k <= row.len()`.
pub fn select<T: Element, const MAG: bool>(row: &[T], k: u64) -> Vec<Candidate<T::Key>> {
    assert!(
        k >= 1 && k <= row.len() as u64,
        "radix select of {k} from {}",
        row.len()
    );
    let (kth, ties) = kth_key::<T, MAG>(row, k);
    collect::<T, MAG>(row, kth, ties)
}

/// The k-th largest key, and how many elements equal to it belong to the top k.
fn kth_key<T: Element, const MAG: bool>(row: &[T], k: u64) -> (u64, u64) {
    let (mut prefix, mut mask, mut remaining) = (0u64, 0u64, k);
    let mut shift = T::Key::BITS;
    while shift > 0 {
        shift -= DIGIT;
        let hist = histogram::<T, MAG>(row, prefix, mask, shift);
        let mut above = 0u64;
        for bin in (0..BINS).rev() {
            if above + hist[bin] >= remaining {
                prefix |= (bin as u64) << shift;
                remaining -= above;
                break;
            }
            above += hist[bin];
        }
        mask |= ((BINS - 1) as u64) << shift;
    }
    (prefix, remaining)
}

fn histogram<T: Element, const MAG: bool>(
    row: &[T],
    prefix: u64,
    mask: u64,
    shift: u32,
) -> Vec<u64> {
    let one = |chunk: &[T]| {
        let mut h = vec![0u64; BINS];
        for &x in chunk {
            let key: u64 = x.key::<MAG>().into();
            if key & mask == prefix {
                h[((key >> shift) as usize) & (BINS - 1)] += 1;
            }
        }
        h
    };
    if row.len() <= CHUNK {
        return one(row);
    }
    row.par_chunks(CHUNK).map(one).reduce(
        || vec![0u64; BINS],
        |mut a, b| {
            a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
            a
        },
    )
}

/// Every element above `kth`, and the `ties` lowest-index elements equal to it.
fn collect<T: Element, const MAG: bool>(row: &[T], kth: u64, ties: u64) -> Vec<Candidate<T::Key>> {
    let one = |(c, chunk): (usize, &[T])| {
        let (mut above, mut equal) = (Vec::new(), Vec::new());
        for (j, &x) in chunk.iter().enumerate() {
            let key = x.key::<MAG>();
            let k64: u64 = key.into();
            let i = (c * CHUNK + j) as u64;
            if k64 > kth {
                above.push((key, i));
            } else if k64 == kth && (equal.len() as u64) < ties {
                equal.push((key, i));
            }
        }
        (above, equal)
    };
    let parts: Vec<_> = if row.len() <= CHUNK {
        vec![one((0, row))]
    } else {
        row.par_chunks(CHUNK).enumerate().map(one).collect()
    };
    let mut out = Vec::new();
    let mut equal_left = ties as usize;
    for (above, equal) in parts {
        out.extend(above);
        // Chunks come in index order, so the first ties met are the lowest-index ones.
        let take = equal.len().min(equal_left);
        out.extend_from_slice(&equal[..take]);
        equal_left -= take;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::select::cpu::rank::arrange;
    use crate::Order;

    #[test]
    fn matches_a_sort_with_ties_across_chunks() {
        let row: Vec<f32> = (0..2 * CHUNK + 3)
            .map(|i| ((i * 31) % 97) as f32 - 50.0)
            .collect();
        for k in [1u64, 5, 1000, 40_000] {
            let mut got = select::<f32, false>(&row, k);
            let got = arrange(&mut got, Order::Desc);
            let mut all: Vec<(u32, u64)> = row
                .iter()
                .enumerate()
                .map(|(i, x)| (x.key::<false>(), i as u64))
                .collect();
            let want = crate::select::cpu::rank::top_of(&mut all, k as usize, Order::Desc);
            assert_eq!(got, want, "k = {k}");
        }
    }
}
