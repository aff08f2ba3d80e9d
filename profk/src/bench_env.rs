//! The switches a benchmark sets in the environment (`PROFK_*`), read once per process: a call
//! pays a map lookup for them, not an environment read. Without the `bench` feature none is set.

/// The value of the benchmark switch `name`, if set.
#[cfg(feature = "bench")]
pub(crate) fn var(name: &str) -> Option<&'static str> {
    use std::collections::HashMap;
    use std::sync::OnceLock;
    static VARS: OnceLock<HashMap<String, String>> = OnceLock::new();
    VARS.get_or_init(|| {
        std::env::vars()
            .filter(|(k, _)| k.starts_with("PROFK_"))
            .collect()
    })
    .get(name)
    .map(String::as_str)
}

/// The value of the benchmark switch `name`: never set without the `bench` feature.
#[cfg(not(feature = "bench"))]
#[inline(always)]
pub(crate) fn var(_name: &str) -> Option<&'static str> {
    None
}

/// The switch `name` as a number, if set and one.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn number(name: &str) -> Option<u64> {
    var(name)?.parse().ok()
}
