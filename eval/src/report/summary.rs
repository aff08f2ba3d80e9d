//! Per-run numbers for the report: medians of the timing metrics, final metrics, and the speed-up of
//! Prof-K over the other selectors of the same config.

use super::RunData;
use crate::metrics::{names, Metrics, Record, RecordKind};
use std::collections::BTreeSet;

/// The selector whose speed-up the report shows.
pub const FAST_SELECTOR: &str = "profk";

/// One row of the run table.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    pub label: String,
    pub steps: u64,
    pub tokens: u64,
    pub wall_s: f64,
    pub median_step_ms: Option<f64>,
    pub median_select_ms: Option<f64>,
    /// Median select time over median step time.
    pub select_share: Option<f64>,
    pub median_tokens_per_s: Option<f64>,
    /// Metrics of the last train record.
    pub final_train: Metrics,
    /// Metrics of the last eval record.
    pub final_eval: Metrics,
}

pub fn summarize(run: &RunData, label: &str) -> RunSummary {
    let train: Vec<&Record> = run.train().collect();
    let last_train = train.last();
    let last_any = run.records.iter().max_by_key(|r| r.step);
    let median_step_ms = median_of(&train, names::STEP_MS);
    let median_select_ms = median_of(&train, names::SELECT_MS);
    RunSummary {
        label: label.to_string(),
        steps: last_any.map_or(0, |r| r.step),
        tokens: last_any.map_or(0, |r| r.tokens),
        wall_s: last_any.map_or(0.0, |r| r.wall_s),
        median_step_ms,
        median_select_ms,
        select_share: match (median_select_ms, median_step_ms) {
            (Some(sel), Some(step)) if step > 0.0 => Some(sel / step),
            _ => None,
        },
        median_tokens_per_s: median_of(&train, names::TOKENS_PER_S),
        final_train: last_train.map(|r| r.metrics.clone()).unwrap_or_default(),
        final_eval: run
            .records
            .iter()
            .rfind(|r| r.kind == RecordKind::Eval)
            .map(|r| r.metrics.clone())
            .unwrap_or_default(),
    }
}

fn median_of(records: &[&Record], metric: &str) -> Option<f64> {
    median(
        records
            .iter()
            .filter_map(|r| r.metrics.get(metric).copied())
            .filter(|v| v.is_finite())
            .collect(),
    )
}

/// Median of finite values; `None` for none.
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len() % 2 == 1 {
        values[mid]
    } else {
        0.5 * (values[mid - 1] + values[mid])
    })
}

/// Prof-K against one other selector of the same config.
#[derive(Debug, Clone, PartialEq)]
pub struct SpeedUp {
    pub config: String,
    /// Index of the Prof-K run in the run list.
    pub fast: usize,
    /// Index of the run it is compared with.
    pub baseline: usize,
    /// Baseline median step ms over Prof-K's.
    pub step: Option<f64>,
    /// Baseline median select ms over Prof-K's.
    pub select: Option<f64>,
}

/// Every (Prof-K run, other-selector run) pair that shares a config name.
pub fn speed_ups(runs: &[RunData], summaries: &[RunSummary]) -> Vec<SpeedUp> {
    let ratio = |num: Option<f64>, den: Option<f64>| match (num, den) {
        (Some(n), Some(d)) if d > 0.0 => Some(n / d),
        _ => None,
    };
    let mut pairs = Vec::new();
    for (fast, run) in runs.iter().enumerate() {
        if run.meta.selector != FAST_SELECTOR {
            continue;
        }
        for (baseline, other) in runs.iter().enumerate() {
            if other.meta.selector == FAST_SELECTOR
                || other.meta.config_name != run.meta.config_name
            {
                continue;
            }
            pairs.push(SpeedUp {
                config: run.meta.config_name.clone(),
                fast,
                baseline,
                step: ratio(
                    summaries[baseline].median_step_ms,
                    summaries[fast].median_step_ms,
                ),
                select: ratio(
                    summaries[baseline].median_select_ms,
                    summaries[fast].median_select_ms,
                ),
            });
        }
    }
    pairs
}

/// Ratio `baseline / fast` of `metric` at the steps both runs logged.
pub fn ratio_over_steps(fast: &RunData, baseline: &RunData, metric: &str) -> Vec<(f64, f64)> {
    let base: std::collections::BTreeMap<u64, f64> = baseline
        .train()
        .filter_map(|r| r.metrics.get(metric).map(|v| (r.step, *v)))
        .collect();
    fast.train()
        .filter_map(|r| {
            let f = *r.metrics.get(metric)?;
            let b = *base.get(&r.step)?;
            (f > 0.0 && b.is_finite() && f.is_finite()).then(|| (r.step as f64, b / f))
        })
        .collect()
}

/// Metric names of `kind` records across the runs: the well-known ones first, then alphabetical.
pub fn metric_names(runs: &[RunData], kind: RecordKind) -> Vec<String> {
    let all: BTreeSet<&String> = runs
        .iter()
        .flat_map(|r| r.records.iter())
        .filter(|r| r.kind == kind)
        .flat_map(|r| r.metrics.keys())
        .collect();
    const FIRST: [&str; 8] = [
        names::LOSS,
        "mse",
        "fvu",
        "l0",
        "dead_fraction",
        "aux_loss",
        "ce_loss_recovered",
        names::TOKENS_PER_S,
    ];
    let mut ordered: Vec<String> = FIRST
        .iter()
        .filter(|n| all.iter().any(|a| a.as_str() == **n))
        .map(|n| n.to_string())
        .collect();
    ordered.extend(
        all.into_iter()
            .filter(|a| !FIRST.contains(&a.as_str()))
            .cloned(),
    );
    ordered
}
