//! Per-run numbers for the report: medians of the timing metrics, final metrics, the speed-up of Prof-K
//! over the other selectors in the pairings, the speed-up a run measured in its own checks, and a
//! fine-tune against its dense baseline.

use super::pairing::{PairKind, Pairing};
use super::RunData;
use harness::metrics::{names, Metrics, Record, RecordKind};
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

/// Prof-K against a run of another selector whose config agrees outside `selector.*` (or one the user
/// paired with it).
#[derive(Debug, Clone, PartialEq)]
pub struct SpeedUp {
    /// Index of the Prof-K run in the run list.
    pub fast: usize,
    /// Index of the run it is compared with.
    pub baseline: usize,
    /// Baseline median step ms over Prof-K's.
    pub step: Option<f64>,
    /// Baseline median select ms over Prof-K's.
    pub select: Option<f64>,
    pub pairing: Pairing,
}

/// The speed-up of each pairing of kind [`PairKind::SpeedUp`].
pub fn speed_ups(pairs: &[Pairing], summaries: &[RunSummary]) -> Vec<SpeedUp> {
    pairs
        .iter()
        .filter(|p| p.kind == PairKind::SpeedUp)
        .map(|p| SpeedUp {
            fast: p.run,
            baseline: p.baseline,
            step: ratio(
                summaries[p.baseline].median_step_ms,
                summaries[p.run].median_step_ms,
            ),
            select: ratio(
                summaries[p.baseline].median_select_ms,
                summaries[p.run].median_select_ms,
            ),
            pairing: p.clone(),
        })
        .collect()
}

fn ratio(num: Option<f64>, den: Option<f64>) -> Option<f64> {
    match (num, den) {
        (Some(n), Some(d)) if d > 0.0 => Some(n / d),
        _ => None,
    }
}

/// The speed-up a single run measured itself: on the steps that checked its selection against another
/// selector on the same input (train-sae's and finetune's `selector.compare`), that selector's time
/// (`compare_select_ms`) over the run's own (`select_ms`).
#[derive(Debug, Clone, PartialEq)]
pub struct InRunCheck {
    /// The selector checked against (config `selector.compare_with`), when recorded.
    pub compared_with: String,
    /// Logged records that include checks.
    pub records: usize,
    /// Medians over those records.
    pub select_ms: Option<f64>,
    pub compare_ms: Option<f64>,
    /// Median over those records of compare_select_ms / select_ms.
    pub speed_up: Option<f64>,
    /// (step, compare_select_ms / select_ms) of each record.
    pub ratios: Vec<(f64, f64)>,
}

/// The run's in-run checks, if it logged any.
pub fn in_run_check(run: &RunData) -> Option<InRunCheck> {
    let checked: Vec<&Record> = run
        .train()
        .filter(|r| r.metrics.contains_key(names::COMPARE_SELECT_MS))
        .collect();
    if checked.is_empty() {
        return None;
    }
    let ratios: Vec<(f64, f64)> = checked
        .iter()
        .filter_map(|r| {
            let other = *r.metrics.get(names::COMPARE_SELECT_MS)?;
            let own = *r.metrics.get(names::SELECT_MS)?;
            (own > 0.0 && own.is_finite() && other.is_finite())
                .then(|| (r.step as f64, other / own))
        })
        .collect();
    let compared_with = run
        .config
        .as_ref()
        .and_then(|c| c.pointer("/selector/compare_with"))
        .and_then(|v| v.as_str())
        .unwrap_or("the other selector")
        .to_string();
    Some(InRunCheck {
        compared_with,
        records: checked.len(),
        select_ms: median_of(&checked, names::SELECT_MS),
        compare_ms: median_of(&checked, names::COMPARE_SELECT_MS),
        speed_up: median(ratios.iter().map(|p| p.1).collect()),
        ratios,
    })
}

/// A sparsified fine-tune beside its dense baseline.
#[derive(Debug, Clone, PartialEq)]
pub struct DenseBaseline {
    pub run: usize,
    pub baseline: usize,
    /// Dense median step ms over the sparsified run's (above 1: sparsification is faster).
    pub step: Option<f64>,
    pub pairing: Pairing,
}

/// Each pairing of kind [`PairKind::DenseBaseline`].
pub fn dense_baselines(pairs: &[Pairing], summaries: &[RunSummary]) -> Vec<DenseBaseline> {
    pairs
        .iter()
        .filter(|p| p.kind == PairKind::DenseBaseline)
        .map(|p| DenseBaseline {
            run: p.run,
            baseline: p.baseline,
            step: ratio(
                summaries[p.baseline].median_step_ms,
                summaries[p.run].median_step_ms,
            ),
            pairing: p.clone(),
        })
        .collect()
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
