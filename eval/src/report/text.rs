//! A plain-text version of the report's tables, for terminals and CI logs.

use super::summary::{speed_ups, summarize, RunSummary};
use super::RunData;
use std::fmt::Write;

/// The run table and the speed-ups as aligned text.
pub fn summary_text(runs: &[RunData], labels: &[String]) -> String {
    let summaries: Vec<RunSummary> = runs
        .iter()
        .zip(labels)
        .map(|(r, l)| summarize(r, l))
        .collect();
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
    let mut rows = vec![[
        "run".to_string(),
        "steps".into(),
        "tokens".into(),
        "step ms".into(),
        "select ms".into(),
        "select share".into(),
    ]];
    for s in &summaries {
        rows.push([
            s.label.clone(),
            s.steps.to_string(),
            s.tokens.to_string(),
            ms(s.median_step_ms),
            ms(s.median_select_ms),
            s.select_share
                .map_or("-".into(), |v| format!("{:.1}%", 100.0 * v)),
        ]);
    }
    let widths: Vec<usize> = (0..6)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let _ = write!(out, "{:<w$}", row[0], w = widths[0]);
        for (cell, w) in row.iter().zip(&widths).skip(1) {
            let _ = write!(out, "  {cell:>w$}");
        }
        out.push('\n');
    }
    out.push_str("(step and select ms: medians over the logged steps)\n");
    for p in speed_ups(runs, &summaries) {
        let x = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}x"));
        let _ = writeln!(
            out,
            "{}: speed-up of profk over {}: step time {}, selection {}",
            p.config,
            summaries[p.baseline].label,
            x(p.step),
            x(p.select)
        );
    }
    out
}
