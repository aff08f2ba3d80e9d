//! Which runs the report sets against each other. Two runs are compared only when their resolved
//! configs (config.json) are equal except where the comparison is about: the selector (`selector.*`)
//! for Prof-K's speed-up, and also the sparsification (`sparsify.*`) for a fine-tune against its dense
//! baseline. A pairing the user forces lists every key the configs differ in. Either way, the
//! conditions the runs ran under (run.json's provenance) are compared, and differences are warned of.

use super::{summary::FAST_SELECTOR, RunData};
use harness::provenance::Provenance;
use serde_json::Value;

/// Keys that never decide what a run computes or how fast: its name and how it reports.
const COSMETIC: [&str; 8] = [
    "name",
    "log.progress",
    "log.progress_every_s",
    "log.wandb",
    "log.wandb_project",
    "log.wandb_entity",
    "log.wandb_mode",
    "log.wandb_tags",
];

/// What a pairing compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairKind {
    /// A Prof-K run against a run of another selector: the speed-up.
    SpeedUp,
    /// A sparsified fine-tune against a dense one (`sparsify.mode = "dense"`): the cost and the loss
    /// of sparsification.
    DenseBaseline,
}

/// One config value that differs between two runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// Dotted key, e.g. `sparsify.density`.
    pub key: String,
    pub a: String,
    pub b: String,
}

/// Two runs the report compares.
#[derive(Debug, Clone, PartialEq)]
pub struct Pairing {
    pub kind: PairKind,
    /// Index of the run measured (Prof-K; the sparsified fine-tune).
    pub run: usize,
    /// Index of the run it is measured against (the other selector; the dense fine-tune).
    pub baseline: usize,
    /// The user asked for this pairing (`--pair`).
    pub forced: bool,
    /// Every config key the two differ in (all of them for a forced pairing; for one found by the
    /// report, only the keys the comparison is about).
    pub differences: Vec<Difference>,
    /// Why the conditions of the two runs may not compare: each a sentence.
    pub warnings: Vec<String>,
}

/// The pairings of `runs`: every one the configs allow, and the `forced` ones (indices into `runs`,
/// measured run first), which come first.
pub fn pairings(runs: &[RunData], forced: &[(usize, usize)]) -> Vec<Pairing> {
    let mut out: Vec<Pairing> = forced
        .iter()
        .map(|&(run, baseline)| {
            let kind = if is_dense(&runs[baseline]) && !is_dense(&runs[run]) {
                PairKind::DenseBaseline
            } else {
                PairKind::SpeedUp
            };
            pairing(runs, kind, run, baseline, true)
        })
        .collect();
    let taken = |out: &[Pairing], a: usize, b: usize| {
        out.iter()
            .any(|p| (p.run, p.baseline) == (a, b) || (p.run, p.baseline) == (b, a))
    };
    for (a, run) in runs.iter().enumerate() {
        for (b, other) in runs.iter().enumerate() {
            if a == b || taken(&out, a, b) {
                continue;
            }
            let kind = if is_speed_up_pair(run, other) {
                PairKind::SpeedUp
            } else if is_dense_baseline_pair(run, other) {
                PairKind::DenseBaseline
            } else {
                continue;
            };
            out.push(pairing(runs, kind, a, b, false));
        }
    }
    out
}

fn pairing(runs: &[RunData], kind: PairKind, run: usize, baseline: usize, forced: bool) -> Pairing {
    let (a, b) = (&runs[run], &runs[baseline]);
    let differences = match (&a.config, &b.config) {
        (Some(x), Some(y)) => differences(x, y),
        _ => vec![Difference {
            key: "config.json".into(),
            a: if a.config.is_some() {
                "saved"
            } else {
                "missing"
            }
            .into(),
            b: if b.config.is_some() {
                "saved"
            } else {
                "missing"
            }
            .into(),
        }],
    };
    let differences = if forced {
        differences
    } else {
        differences
            .into_iter()
            .filter(|d| !COSMETIC.contains(&d.key.as_str()))
            .collect()
    };
    Pairing {
        kind,
        run,
        baseline,
        forced,
        differences,
        warnings: condition_warnings(a, b),
    }
}

/// A Prof-K run and a run of another selector whose configs agree outside `selector.*`.
fn is_speed_up_pair(run: &RunData, other: &RunData) -> bool {
    run.meta.selector == FAST_SELECTOR
        && !other.meta.selector.is_empty()
        && other.meta.selector != FAST_SELECTOR
        && !is_dense(run)
        && !is_dense(other)
        && same_config_outside(run, other, &["selector"])
}

/// A sparsified fine-tune and a dense one whose configs agree outside `selector.*` and `sparsify.*`.
fn is_dense_baseline_pair(run: &RunData, other: &RunData) -> bool {
    !is_dense(run)
        && is_dense(other)
        && has_sparsify(run)
        && same_config_outside(run, other, &["selector", "sparsify"])
}

/// The run's config says `sparsify.mode = "dense"`.
pub fn is_dense(run: &RunData) -> bool {
    config_str(run, "/sparsify/mode") == Some("dense")
}

fn has_sparsify(run: &RunData) -> bool {
    run.config
        .as_ref()
        .is_some_and(|c| c.pointer("/sparsify").is_some())
}

fn config_str<'a>(run: &'a RunData, pointer: &str) -> Option<&'a str> {
    run.config.as_ref()?.pointer(pointer)?.as_str()
}

/// Both configs are saved and equal except in the sections `free` and the cosmetic keys.
fn same_config_outside(a: &RunData, b: &RunData, free: &[&str]) -> bool {
    let (Some(x), Some(y)) = (&a.config, &b.config) else {
        return false;
    };
    differences(x, y).iter().all(|d| {
        COSMETIC.contains(&d.key.as_str())
            || free
                .iter()
                .any(|s| d.key == *s || d.key.starts_with(&format!("{s}.")))
    })
}

/// Every leaf where two configs differ, by dotted key (a key only one has counts, with "–" for the
/// other), in key order.
pub fn differences(a: &Value, b: &Value) -> Vec<Difference> {
    let mut out = Vec::new();
    collect_differences(Some(a), Some(b), "", &mut out);
    out
}

fn collect_differences(a: Option<&Value>, b: Option<&Value>, at: &str, out: &mut Vec<Difference>) {
    if let (Some(Value::Object(x)), Some(Value::Object(y))) = (a, b) {
        let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
        keys.sort();
        keys.dedup();
        for k in keys {
            let key = if at.is_empty() {
                k.clone()
            } else {
                format!("{at}.{k}")
            };
            collect_differences(x.get(k), y.get(k), &key, out);
        }
        return;
    }
    if a != b {
        let show = |v: Option<&Value>| match v {
            None => "–".to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        };
        out.push(Difference {
            key: if at.is_empty() {
                "<config>".into()
            } else {
                at.into()
            },
            a: show(a),
            b: show(b),
        });
    }
}

/// Sentences on how the conditions of runs `a` and `b` differ: provenance not recorded, facts that
/// differ, a run resumed under other conditions.
pub fn condition_warnings(a: &RunData, b: &RunData) -> Vec<String> {
    let mut out = Vec::new();
    match (&a.meta.provenance, &b.meta.provenance) {
        (Some(x), Some(y)) => {
            for (fact, va, vb) in x.differences(y) {
                out.push(format!(
                    "{fact} differs: {va} ({}) vs {vb} ({})",
                    a.meta.name, b.meta.name
                ));
            }
        }
        _ => {
            let missing: Vec<&str> = [a, b]
                .iter()
                .filter(|r| r.meta.provenance.is_none())
                .map(|r| r.meta.name.as_str())
                .collect();
            out.push(format!(
                "{} recorded no host, GPU, commit or model hash (run before run.json held them): \
                 the conditions cannot be checked",
                missing.join(" and ")
            ));
        }
    }
    for r in [a, b] {
        out.extend(resumed_elsewhere(r));
    }
    out
}

/// A warning for a run whose resumed segments ran under other conditions.
pub fn resumed_elsewhere(run: &RunData) -> Option<String> {
    let now = run.meta.provenance.as_ref()?;
    let facts: Vec<&str> = run
        .meta
        .earlier_provenance
        .iter()
        .flat_map(|p: &Provenance| p.differences(now))
        .map(|d| d.0)
        .collect();
    if facts.is_empty() {
        return None;
    }
    let mut facts = facts;
    facts.sort();
    facts.dedup();
    Some(format!(
        "{} was resumed under other conditions ({}): its timings mix them",
        run.meta.name,
        facts.join(", ")
    ))
}

/// For a Prof-K run that found no run to compare with: the run of another selector whose config is
/// closest, with the keys it differs in (what the page shows so the user sees why, and can `--pair`).
pub fn nearest_unpaired(
    runs: &[RunData],
    pairs: &[Pairing],
) -> Vec<(usize, usize, Vec<Difference>)> {
    let mut out = Vec::new();
    for (a, run) in runs.iter().enumerate() {
        if run.meta.selector != FAST_SELECTOR || pairs.iter().any(|p| p.run == a) {
            continue;
        }
        let nearest = runs
            .iter()
            .enumerate()
            .filter(|(b, other)| {
                *b != a && !other.meta.selector.is_empty() && other.meta.selector != FAST_SELECTOR
            })
            .filter_map(|(b, other)| {
                let (x, y) = (run.config.as_ref()?, other.config.as_ref()?);
                let d: Vec<Difference> = differences(x, y)
                    .into_iter()
                    .filter(|d| {
                        !COSMETIC.contains(&d.key.as_str()) && !d.key.starts_with("selector.")
                    })
                    .collect();
                Some((b, d))
            })
            .min_by_key(|(_, d)| d.len());
        if let Some((b, d)) = nearest {
            out.push((a, b, d));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn differences_are_every_differing_leaf() {
        let a = json!({"name": "x", "sae": {"k": 32, "n": 4}, "only_a": true});
        let b = json!({"name": "y", "sae": {"k": 64, "n": 4}});
        let d = differences(&a, &b);
        let keys: Vec<&str> = d.iter().map(|d| d.key.as_str()).collect();
        assert_eq!(keys, ["name", "only_a", "sae.k"]);
        assert_eq!((d[2].a.as_str(), d[2].b.as_str()), ("32", "64"));
        assert_eq!(d[1].b, "–");
        assert!(differences(&a, &a).is_empty());
    }
}
