//! The TOML config under random and mutated text: an error or a valid config, never a panic.
//!
//! Case counts (20 000 in all, a few seconds): mutated configs 10 000, random numbers in every numeric
//! key 10 000.
use crate::common;
use common::synthetic_config;
use proptest::prelude::*;
use sae::Config;

fn cases(n: u32) -> ProptestConfig {
    ProptestConfig {
        cases: n,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn texts() -> Vec<String> {
    vec![
        synthetic_config("batchtopk", "", 1),
        synthetic_config("matryoshka", "group_sizes = [16, 16, 32]", 1),
        synthetic_config("crosscoder", "", 3),
        include_str!("../../../configs/tiny.toml").to_string(),
    ]
}

proptest! {
    #![proptest_config(cases(10_000))]
    #[test]
    fn mutated_configs_never_panic(
        which in 0usize..4,
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut bytes = texts().swap_remove(which).into_bytes();
        for (at, b) in &edits {
            let i = at.index(bytes.len());
            bytes[i] = *b;
        }
        if truncate {
            bytes.truncate(cut.index(bytes.len() + 1));
        }
        if let Ok(cfg) = Config::from_toml(&String::from_utf8_lossy(&bytes)) {
            prop_assert!(cfg.sae.k >= 1 && cfg.sae.k <= cfg.sae.latents);
        }
    }
}

fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u64..100).prop_map(|v| v.to_string()),
        any::<i64>().prop_map(|v| v.to_string()),
        any::<f64>().prop_map(|v| format!("{v:?}")),
        Just("nan".to_string()),
        Just("-inf".to_string()),
        Just("18446744073709551615".to_string()),
    ]
}

proptest! {
    #![proptest_config(cases(10_000))]
    #[test]
    fn any_numbers_are_accepted_or_refused_by_key(values in proptest::collection::vec(number(), 16)) {
        // Every number of the synthetic config replaced, in order, by an arbitrary one.
        let base = synthetic_config("batchtopk", "", 1);
        let mut out = String::new();
        let mut values = values.into_iter().cycle();
        for line in base.lines() {
            match line.split_once(" = ") {
                Some((key, v)) if v.starts_with(|c: char| c.is_ascii_digit()) => {
                    out.push_str(&format!("{key} = {}\n", values.next().unwrap_or_default()));
                }
                _ => {
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
        match Config::from_toml(&out) {
            Ok(cfg) => prop_assert!(cfg.train.batch_size >= 1 && cfg.train.steps >= 1),
            Err(e) => {
                let msg = e.to_string();
                // A key named in backquotes, or the config's line for a value TOML itself refuses.
                prop_assert!(
                    msg.contains('`') || msg.contains("parse") || msg.contains("<config>:"),
                    "{}",
                    msg
                );
            }
        }
    }
}
