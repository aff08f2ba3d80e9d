//! A plain-text version of the report's tables, for terminals and CI logs.

use super::pairing::Pairing;
use super::summary::{dense_baselines, in_run_check, speed_ups, summarize, RunSummary};
use super::RunData;
use std::fmt::Write;

/// The run table and the speed-ups as aligned text.
pub fn summary_text(runs: &[RunData], labels: &[String], pairs: &[Pairing]) -> String {
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
    let x = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}x"));
    for p in speed_ups(pairs, &summaries) {
        let _ = writeln!(
            out,
            "{}: speed-up of profk over {}: step time {}, selection {}{}",
            summaries[p.fast].label,
            summaries[p.baseline].label,
            x(p.step),
            x(p.select),
            if p.pairing.forced {
                " (paired by --pair)"
            } else {
                ""
            }
        );
        pairing_notes(&mut out, &p.pairing);
    }
    for d in dense_baselines(pairs, &summaries) {
        let _ = writeln!(
            out,
            "{}: against its dense baseline {}: step time {} (dense / sparsified)",
            summaries[d.run].label,
            summaries[d.baseline].label,
            x(d.step)
        );
        pairing_notes(&mut out, &d.pairing);
    }
    for (run, s) in runs.iter().zip(&summaries) {
        if let Some(c) = in_run_check(run) {
            let _ = writeln!(
                out,
                "{}: selection speed-up measured in-run against {} ({} logged checks): {}",
                s.label,
                c.compared_with,
                c.records,
                x(c.speed_up)
            );
        }
        if let Some(warning) = super::html::no_held_out_warning(&s.final_eval) {
            let _ = writeln!(out, "{}: warning: {warning}", s.label);
        }
    }
    out
}

fn pairing_notes(out: &mut String, p: &Pairing) {
    if p.forced {
        for d in &p.differences {
            let _ = writeln!(out, "  config differs: {} = {} vs {}", d.key, d.a, d.b);
        }
    }
    for w in &p.warnings {
        let _ = writeln!(out, "  warning: {w}");
    }
}
