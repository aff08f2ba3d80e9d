//! The reference selectors of the CPU path: a full sort, and a partial selection plus a sort of the
//! k.
//!
//! Both materialize (key, index) pairs of the whole row, single-threaded per row, as a user would
//! write them with the standard library. They share the ranking order of Prof-K, so every selector
//! returns the same indices.

use super::cpu::rank::{arrange, Candidate};
use super::key::Element;
use crate::Order;
use std::cmp::Ordering;

/// Which baseline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Baseline {
    /// Every pair sorted, then the first k.
    Sort,
    /// `select_nth_unstable_by` on the pairs, then a sort of the k.
    Select,
}

/// Indices of the top `k` of `row` in the requested order.
pub fn run<T: Element, const MAG: bool>(
    row: &[T],
    k: usize,
    order: Order,
    baseline: Baseline,
) -> Vec<u64> {
    if k == 0 {
        return Vec::new();
    }
    // 32-bit indices where they suffice: smaller pairs, less memory traffic.
    if u32::try_from(row.len()).is_ok() {
        run_with::<T, MAG, u32>(row, k, order, baseline)
    } else {
        run_with::<T, MAG, u64>(row, k, order, baseline)
    }
}

trait PairIndex: Copy + Ord + Into<u64> {
    fn from_usize(i: usize) -> Self;
}

impl PairIndex for u32 {
    fn from_usize(i: usize) -> Self {
        i as u32
    }
}

impl PairIndex for u64 {
    fn from_usize(i: usize) -> Self {
        i as u64
    }
}

/// Larger key first, ties by lower index: the ranking order of every selector.
fn by_rank<K: Ord, I: Ord>(a: &(K, I), b: &(K, I)) -> Ordering {
    b.0.cmp(&a.0).then(a.1.cmp(&b.1))
}

fn run_with<T: Element, const MAG: bool, I: PairIndex>(
    row: &[T],
    k: usize,
    order: Order,
    baseline: Baseline,
) -> Vec<u64> {
    let mut pairs: Vec<(T::Key, I)> = row
        .iter()
        .enumerate()
        .map(|(i, x)| (x.key::<MAG>(), I::from_usize(i)))
        .collect();
    match baseline {
        Baseline::Sort => pairs.sort_unstable_by(by_rank),
        Baseline::Select if k < pairs.len() => {
            pairs.select_nth_unstable_by(k - 1, by_rank);
        }
        Baseline::Select => {}
    }
    let mut chosen: Vec<Candidate<T::Key>> =
        pairs[..k].iter().map(|&(key, i)| (key, i.into())).collect();
    arrange(&mut chosen, order)
}
