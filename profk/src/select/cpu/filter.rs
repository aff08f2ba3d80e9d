//! Stage 3: one pass over the row that counts every element ranking at or above the threshold and keeps
//! at most about `capacity` of them.
//!
//! "At or above" in the ranking order (larger key, ties by lower index) splits the row at the
//! threshold's index: up to it an element passes with `key >= threshold`, after it with
//! `key >= threshold + 1`. Both halves are then plain integer comparisons ([`Element::passes`]), which
//! vectorize: each block is first counted branch-free, and only blocks with a passing element are
//! walked again to store.
//!
//! Each parallel chunk counts on its own. Stores are reported to a shared counter in batches: once
//! more than `capacity` elements are stored, R > M is certain and the chunks stop storing, which bounds
//! the memory of a failed attempt without a shared write per passing element.

use super::rank::Candidate;
use super::sample::Threshold;
use crate::select::key::{Element, KeyBits};
use rayon::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};

/// Elements counted per branch-free step: small, so that a block holding a passing element costs
/// little to walk again.
const BLOCK: usize = 16;
/// Elements per parallel task of a long row.
const CHUNK: usize = 1 << 18;
/// Stores a chunk makes before it reports them to the shared counter.
const REPORT: u64 = 1024;

/// What one pass found.
#[derive(Debug)]
pub struct Pass<K> {
    /// R: how many elements rank at or above the threshold (exact, also beyond the capacity).
    pub retained: u64,
    /// NaNs among them. Every NaN passes unless the threshold itself is a NaN.
    pub nans: u64,
    /// The stored candidates, in index order: all `retained` of them when `retained <= capacity`.
    pub candidates: Vec<Candidate<K>>,
}

/// Filters `row` against `thr`, in parallel over chunks when the row is long.
pub fn filter<T: Element, const MAG: bool>(
    row: &[T],
    thr: Threshold<T::Key>,
    capacity: u64,
) -> Pass<T::Key> {
    let stored = AtomicU64::new(0);
    let parts: Vec<Pass<T::Key>> = if row.len() <= CHUNK {
        vec![scan_chunk::<T, MAG>(row, 0, thr, capacity, &stored)]
    } else {
        row.par_chunks(CHUNK)
            .enumerate()
            .map(|(c, chunk)| {
                scan_chunk::<T, MAG>(chunk, (c * CHUNK) as u64, thr, capacity, &stored)
            })
            .collect()
    };
    let mut pass = Pass {
        retained: 0,
        nans: 0,
        candidates: Vec::new(),
    };
    pass.candidates
        .reserve(parts.iter().map(|p| p.candidates.len()).sum());
    for p in parts {
        pass.retained += p.retained;
        pass.nans += p.nans;
        pass.candidates.extend(p.candidates);
    }
    pass
}

fn scan_chunk<T: Element, const MAG: bool>(
    chunk: &[T],
    base: u64,
    thr: Threshold<T::Key>,
    capacity: u64,
    stored: &AtomicU64,
) -> Pass<T::Key> {
    let mut part = Chunk {
        pass: Pass {
            retained: 0,
            nans: 0,
            candidates: Vec::new(),
        },
        unreported: 0,
        storing: true,
    };
    let split = (thr.index + 1).saturating_sub(base).min(chunk.len() as u64) as usize;
    let (low, high) = chunk.split_at(split);
    let at_least = T::raw_threshold::<MAG>(thr.key);
    part.scan::<T, MAG>(low, base, at_least, capacity, stored);
    // After the threshold's index a tie ranks below it; nothing ranks above the largest key.
    if let Some(above) = thr.key.successor() {
        let above = T::raw_threshold::<MAG>(above);
        part.scan::<T, MAG>(high, base + split as u64, above, capacity, stored);
    }
    part.pass
}

struct Chunk<K> {
    pass: Pass<K>,
    /// Stores not yet added to the shared counter.
    unreported: u64,
    /// False once the row is known to overflow.
    storing: bool,
}

impl<K> Chunk<K> {
    fn scan<T: Element<Key = K>, const MAG: bool>(
        &mut self,
        data: &[T],
        base: u64,
        min_raw: T::Raw,
        capacity: u64,
        stored: &AtomicU64,
    ) {
        for (b, block) in data.chunks(BLOCK).enumerate() {
            let passing: u32 = block
                .iter()
                .map(|x| u32::from(x.passes::<MAG>(min_raw)))
                .sum();
            if passing == 0 {
                continue;
            }
            self.pass.retained += u64::from(passing);
            let first = base + (b * BLOCK) as u64;
            for (j, &x) in block.iter().enumerate() {
                if x.passes::<MAG>(min_raw) {
                    self.pass.nans += u64::from(x.is_nan_value());
                    if self.storing {
                        self.pass
                            .candidates
                            .push((x.key::<MAG>(), first + j as u64));
                        self.unreported += 1;
                    }
                }
            }
            if self.unreported >= REPORT {
                let before = stored.fetch_add(self.unreported, Ordering::Relaxed);
                // Every stored element passed: more stores than the capacity means R > M.
                self.storing = before + self.unreported <= capacity;
                self.unreported = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_exactly_and_keeps_ties_up_to_the_threshold_index() {
        let row = [2.0f32, 5.0, 5.0, 1.0, 5.0, 7.0, f32::NAN];
        let thr = Threshold {
            key: 5.0f32.key::<false>(),
            index: 2,
        };
        let pass = filter::<f32, false>(&row, thr, 10);
        let idx: Vec<u64> = pass.candidates.iter().map(|c| c.1).collect();
        assert_eq!(idx, vec![1, 2, 5, 6]);
        assert_eq!((pass.retained, pass.nans), (4, 1));
        let capped = filter::<f32, false>(&row, thr, 2);
        assert_eq!(capped.retained, 4);
    }

    #[test]
    fn long_rows_split_into_chunks_agree() {
        let row: Vec<f32> = (0..3 * CHUNK + 17)
            .map(|i| ((i * 7919) % 1000) as f32)
            .collect();
        let thr = Threshold {
            key: 990.0f32.key::<false>(),
            index: CHUNK as u64 + 5,
        };
        let pass = filter::<f32, false>(&row, thr, u64::MAX);
        let expect = row
            .iter()
            .enumerate()
            .filter(|&(i, &v)| v > 990.0 || (v == 990.0 && i <= CHUNK + 5))
            .count() as u64;
        assert_eq!(pass.retained, expect);
        assert_eq!(pass.candidates.len() as u64, expect);
        // An overflowing pass still counts exactly, and stops storing soon after the capacity.
        let all = Threshold {
            key: (-1.0f32).key::<false>(),
            index: 0,
        };
        let over = filter::<f32, false>(&row, all, 10);
        assert_eq!(over.retained, row.len() as u64);
        assert!(
            (over.candidates.len() as u64) < 8 * REPORT + BLOCK as u64 * 8,
            "{}",
            over.candidates.len()
        );
    }
}
