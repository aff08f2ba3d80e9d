//! Parameters memoized per configuration: a training run asks for the same (n, k, ε) every step.

use std::collections::HashMap;
use std::sync::{OnceLock, PoisonError, RwLock};

use super::{exact, fast, Method, Params};
use crate::error::Result;

/// Bound on the memo; a workload cycling through more configurations than this recomputes.
const MAX_ENTRIES: usize = 1 << 16;

/// (n, k, ε bits, method, sample size; 0 = the default).
type Key = (u64, u64, u64, Method, u64);

fn memo() -> &'static RwLock<HashMap<Key, Params>> {
    static MEMO: OnceLock<RwLock<HashMap<Key, Params>>> = OnceLock::new();
    MEMO.get_or_init(|| RwLock::new(HashMap::new()))
}

/// [`exact`] or [`fast`] with the default sample size, computed once per (n, k, ε, method) and
/// shared by all threads. Errors are not memoized.
pub fn cached(n: u64, k: u64, eps: f64, method: Method) -> Result<Params> {
    cached_with_sample(n, k, eps, method, None)
}

/// [`cached`] with a given sample size (`None`: the default).
pub fn cached_with_sample(
    n: u64,
    k: u64,
    eps: f64,
    method: Method,
    sample: Option<u64>,
) -> Result<Params> {
    let key = (n, k, eps.to_bits(), method, sample.unwrap_or(0));
    if let Some(params) = memo()
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&key)
    {
        return Ok(*params);
    }
    let params = match method {
        Method::Exact => exact(n, k, eps, sample)?,
        Method::Fast => fast(n, k, eps, sample)?,
    };
    let mut map = memo().write().unwrap_or_else(PoisonError::into_inner);
    if map.len() >= MAX_ENTRIES {
        map.clear();
    }
    map.insert(key, params);
    Ok(params)
}
