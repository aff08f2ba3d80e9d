//! The ranking order shared by every CPU selector: larger key first, ties by lower index.
//!
//! With the index as tie-break the order is strict, so the top k is unique: the answer never depends on
//! the sample, the thread count or the selector.

use crate::Order;
use std::cmp::Ordering;

/// A candidate: its key and its index in the row.
pub type Candidate<K> = (K, u64);

/// `Less` means `a` ranks above `b`.
#[inline]
pub fn rank_order<K: Ord>(a: &Candidate<K>, b: &Candidate<K>) -> Ordering {
    b.0.cmp(&a.0).then(a.1.cmp(&b.1))
}

/// Indices of the exact top `k` of `cands` in the requested output order. Needs `k <= cands.len()`.
pub fn top_of<K: Ord>(cands: &mut [Candidate<K>], k: usize, order: Order) -> Vec<u64> {
    assert!(k <= cands.len(), "top {k} of {} candidates", cands.len());
    if k == 0 {
        return Vec::new();
    }
    if k < cands.len() {
        cands.select_nth_unstable_by(k - 1, rank_order);
    }
    arrange(&mut cands[..k], order)
}

/// Indices of an already selected set, in the requested output order.
pub fn arrange<K: Ord>(chosen: &mut [Candidate<K>], order: Order) -> Vec<u64> {
    match order {
        Order::Desc => chosen.sort_unstable_by(rank_order),
        Order::Index => chosen.sort_unstable_by_key(|c| c.1),
    }
    chosen.iter().map(|c| c.1).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_go_to_the_lowest_index() {
        let mut c = vec![(5u32, 3), (7, 9), (5, 1), (7, 2), (1, 0)];
        assert_eq!(top_of(&mut c.clone(), 3, Order::Desc), vec![2, 9, 1]);
        assert_eq!(top_of(&mut c, 3, Order::Index), vec![1, 2, 9]);
    }
}
