//! The CPU's sample size. The default rule of `params` is calibrated on a GPU, where a sampled element
//! costs less than a buffer slot; on a CPU a sampled element is a cache miss plus its share of a sort,
//! while the filter pass streams at memory speed. Short rows therefore take a smaller sample
//! (`n / 128`, at least 512), long rows keep the default, and t and M stay exact for the chosen S.

use crate::params::{self, Method, Params};
use crate::Result;
use std::collections::HashMap;
use std::sync::{OnceLock, PoisonError, RwLock};

/// Smallest sample the CPU rule picks.
const MIN_SAMPLE: u64 = 512;
/// The CPU rule samples at most one element in this many.
const ROW_PER_SAMPLE: u64 = 128;
/// Bound on the memo; a workload cycling through more configurations recomputes.
const MAX_ENTRIES: usize = 1 << 12;

type Key = (u64, u64, u64);

/// Exact parameters for rows of `n` on the CPU, memoized per (n, k, ε).
pub fn params(n: u64, k: u64, eps: f64) -> Result<Params> {
    let default = params::cached(n, k, eps, Method::Exact)?;
    let sample = (n / ROW_PER_SAMPLE).max(MIN_SAMPLE);
    if default.sample <= sample {
        return Ok(default);
    }
    static MEMO: OnceLock<RwLock<HashMap<Key, Params>>> = OnceLock::new();
    let memo = MEMO.get_or_init(|| RwLock::new(HashMap::new()));
    let key = (n, k, eps.to_bits());
    if let Some(p) = memo
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&key)
    {
        return Ok(*p);
    }
    let p = params::exact(n, k, eps, Some(sample))?;
    let mut map = memo.write().unwrap_or_else(PoisonError::into_inner);
    if map.len() >= MAX_ENTRIES {
        map.clear();
    }
    map.insert(key, p);
    Ok(p)
}
