//! Stage 3: one pass over the row that counts every element ranking at or above the threshold and keeps
//! at most `capacity` of them.
//!
//! "At or above" in the ranking order (larger key, ties by lower index) splits the row at the
//! threshold's index: up to it an element passes with `key >= threshold`, after it with
//! `key >= threshold + 1`. Both halves are then plain integer comparisons, which vectorize: each block
//! is first counted branch-free, and only blocks with a passing element are walked again to store.

use super::rank::Candidate;
use super::sample::Threshold;
use crate::select::key::{Element, KeyBits};
use rayon::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};

/// Elements counted per branch-free step.
const BLOCK: usize = 256;
/// Elements per parallel task of a long row.
const CHUNK: usize = 1 << 18;

/// What one pass found.
#[derive(Debug)]
pub struct Pass<K> {
    /// R: how many elements rank at or above the threshold (exact, also beyond the capacity).
    pub retained: u64,
    /// NaNs among them. Every NaN passes unless the threshold itself is a NaN.
    pub nans: u64,
    /// The stored candidates: all `retained` of them when `retained <= capacity`.
    pub candidates: Vec<Candidate<K>>,
}

/// Filters `row` against `thr`, in parallel over chunks when the row is long.
pub fn filter<T: Element, const MAG: bool>(
    row: &[T],
    thr: Threshold<T::Key>,
    capacity: u64,
) -> Pass<T::Key> {
    let reserved = AtomicU64::new(0);
    let parts: Vec<Part<T::Key>> = if row.len() <= CHUNK {
        vec![scan_chunk::<T, MAG>(row, 0, thr, capacity, &reserved)]
    } else {
        row.par_chunks(CHUNK)
            .enumerate()
            .map(|(c, chunk)| {
                scan_chunk::<T, MAG>(chunk, (c * CHUNK) as u64, thr, capacity, &reserved)
            })
            .collect()
    };
    let mut candidates = Vec::with_capacity(parts.iter().map(|p| p.candidates.len()).sum());
    let mut nans = 0;
    for p in parts {
        candidates.extend(p.candidates);
        nans += p.nans;
    }
    Pass {
        retained: reserved.into_inner(),
        nans,
        candidates,
    }
}

struct Part<K> {
    nans: u64,
    candidates: Vec<Candidate<K>>,
}

fn scan_chunk<T: Element, const MAG: bool>(
    chunk: &[T],
    base: u64,
    thr: Threshold<T::Key>,
    capacity: u64,
    reserved: &AtomicU64,
) -> Part<T::Key> {
    let mut part = Part {
        nans: 0,
        candidates: Vec::new(),
    };
    let split = (thr.index + 1).saturating_sub(base).min(chunk.len() as u64) as usize;
    let (low, high) = chunk.split_at(split);
    scan::<T, MAG>(low, base, thr.key, capacity, reserved, &mut part);
    // After the threshold's index a tie ranks below it; nothing ranks above the largest key.
    if let Some(above) = thr.key.successor() {
        scan::<T, MAG>(
            high,
            base + split as u64,
            above,
            capacity,
            reserved,
            &mut part,
        );
    }
    part
}

fn scan<T: Element, const MAG: bool>(
    data: &[T],
    base: u64,
    min_key: T::Key,
    capacity: u64,
    reserved: &AtomicU64,
    part: &mut Part<T::Key>,
) {
    for (b, block) in data.chunks(BLOCK).enumerate() {
        let passing: u32 = block
            .iter()
            .map(|x| u32::from(x.key::<MAG>() >= min_key))
            .sum();
        if passing == 0 {
            continue;
        }
        // One reservation per block: the counter ends at exactly R, and stores stop at the capacity.
        let start = reserved.fetch_add(u64::from(passing), Ordering::Relaxed);
        let mut room = capacity.saturating_sub(start);
        let first = base + (b * BLOCK) as u64;
        for (j, &x) in block.iter().enumerate() {
            let key = x.key::<MAG>();
            if key >= min_key {
                part.nans += u64::from(key == T::Key::MAX && x.is_nan_value());
                if room > 0 {
                    part.candidates.push((key, first + j as u64));
                    room -= 1;
                }
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
        assert_eq!((capped.retained, capped.candidates.len()), (4, 2));
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
    }
}
