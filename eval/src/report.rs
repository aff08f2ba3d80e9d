//! The run-comparison report: one self-contained HTML page (inline SVG, inline CSS, no external assets)
//! comparing runs: step and selection time, Prof-K's speed-up over runs whose configs differ only in
//! the selector ([`pairing`]), the speed-up a run measured in its own checks, a fine-tune against its
//! dense baseline, every training and eval metric over steps (or tokens), the run context and where
//! each run ran (warning when compared runs ran under different conditions), dead latents, and the
//! feature dashboards of `features.json`. Every run has a colour and a label of its own.

pub mod features;
pub mod html;
pub mod pairing;
pub mod plots;
pub mod summary;
mod text;

use harness::atomic::write_atomic;
use harness::error::{Error, Result};
use harness::metrics::{read_records, Record, RecordKind};
use harness::output_path::check_output_path;
use harness::run_dir::{
    RunDir, RunMeta, CONFIG_JSON_FILE, CONFIG_TOML_FILE, METRICS_FILE, RUN_META_FILE,
};
use std::path::{Path, PathBuf};

/// Everything the report reads from one run directory.
#[derive(Debug, Clone, PartialEq)]
pub struct RunData {
    pub dir: PathBuf,
    pub meta: RunMeta,
    pub config: Option<serde_json::Value>,
    pub records: Vec<Record>,
    /// The run's feature dashboards (`features.json`), when it has them.
    pub features: Option<features::FeatureDashboards>,
}

impl RunData {
    /// Reads run.json (optional), config.json (optional), features.json (optional) and metrics.jsonl
    /// (required).
    pub fn load(run: &RunDir) -> Result<RunData> {
        let metrics = run.metrics_path();
        if !metrics.exists() {
            return Err(Error::RunDir {
                path: run.path().to_path_buf(),
                message: "has no metrics.jsonl (did the run log any step?)".into(),
            });
        }
        Ok(RunData {
            dir: run.path().to_path_buf(),
            meta: run.read_meta()?,
            config: run.read_config_json()?,
            records: read_records(&metrics)?,
            features: features::FeatureDashboards::load(run.path())?,
        })
    }

    pub fn train(&self) -> impl Iterator<Item = &Record> {
        self.records.iter().filter(|r| r.kind == RecordKind::Train)
    }

    pub fn eval(&self) -> impl Iterator<Item = &Record> {
        self.records.iter().filter(|r| r.kind == RecordKind::Eval)
    }
}

/// Opens each run directory and writes the report to `out` (atomically); returns what it read. An `out`
/// that is one of the files read (a run's metrics, run.json or config.json) is refused before anything
/// is read.
pub fn write_report(runs: &[RunDir], out: &Path) -> Result<Vec<RunData>> {
    write_report_paired(runs, &[], out)
}

/// [`write_report`] with pairings the user forces: indices into `runs`, the measured run (Prof-K, the
/// sparsified fine-tune) first. The page lists every config key the two differ in.
pub fn write_report_paired(
    runs: &[RunDir],
    forced: &[(usize, usize)],
    out: &Path,
) -> Result<Vec<RunData>> {
    let inputs: Vec<PathBuf> = runs
        .iter()
        .flat_map(|r| {
            [
                METRICS_FILE,
                RUN_META_FILE,
                CONFIG_JSON_FILE,
                CONFIG_TOML_FILE,
            ]
            .map(|f| r.path().join(f))
        })
        .collect();
    let inputs: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    let out = &check_output_path(out, &inputs)?;
    let data = runs.iter().map(RunData::load).collect::<Result<Vec<_>>>()?;
    let html = render_paired(&data, forced)?;
    write_atomic(out, html.as_bytes())?;
    Ok(data)
}

/// Writes `<run>/report.html` for one finished run (what a trainer calls after `MetricsSink::finish`).
pub fn write_run_report(run: &RunDir) -> Result<PathBuf> {
    let out = run.report_path();
    write_report(std::slice::from_ref(run), &out)?;
    Ok(out)
}

/// The report page for `runs`.
pub fn render(runs: &[RunData]) -> Result<String> {
    render_paired(runs, &[])
}

/// The report page for `runs` with the `forced` pairings (see [`write_report_paired`]).
pub fn render_paired(runs: &[RunData], forced: &[(usize, usize)]) -> Result<String> {
    if runs.is_empty() {
        return Err(Error::Report("no runs to report on".into()));
    }
    if let Some(&(a, b)) = forced
        .iter()
        .find(|(a, b)| a == b || *a >= runs.len() || *b >= runs.len())
    {
        return Err(Error::Report(format!(
            "cannot pair run {a} with run {b} of {} runs",
            runs.len()
        )));
    }
    html::page(runs, &labels(runs), &pairing::pairings(runs, forced))
}

/// The run table and Prof-K's speed-ups as plain text (what `sparsetrain-report` prints).
pub fn summary_text(runs: &[RunData], forced: &[(usize, usize)]) -> String {
    text::summary_text(runs, &labels(runs), &pairing::pairings(runs, forced))
}

/// One label per run, unique: the run's name (its directory's name), numbered where two share one.
pub fn labels(runs: &[RunData]) -> Vec<String> {
    let names: Vec<String> = runs
        .iter()
        .map(|r| {
            if r.meta.name.is_empty() {
                r.dir.display().to_string()
            } else {
                r.meta.name.clone()
            }
        })
        .collect();
    let unique = names
        .iter()
        .collect::<std::collections::BTreeSet<_>>()
        .len()
        == names.len();
    if unique {
        return names;
    }
    names
        .iter()
        .enumerate()
        .map(|(i, n)| format!("{n} #{}", i + 1))
        .collect()
}
