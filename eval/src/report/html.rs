//! Page assembly: sections, tables and charts, with all text escaped.

use super::features;
use super::pairing::{nearest_unpaired, resumed_elsewhere, Difference, Pairing};
use super::plots::{
    line_chart, part_of_total_bars, run_color, ChartSpec, LineStyle, Reference, Series,
    SMOOTH_ABOVE,
};
use super::summary::{
    dense_baselines, in_run_check, metric_names, ratio_over_steps, speed_ups, summarize,
    DenseBaseline, RunSummary, SpeedUp,
};
use super::RunData;
use harness::error::Result;
use harness::metrics::{names, RecordKind};
use plotters::style::RGBColor;
use runtime::host::iso_timestamp;
use std::fmt::Write;

const STYLE: &str = "
body { font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 20px 24px;
       color: #222; background: #fafafa; }
h1 { font-size: 26px; margin: 0 0 4px 0; }
h2 { font-size: 19px; margin: 30px 0 10px 0; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.sub { color: #666; margin: 0 0 12px 0; font-size: 13px; }
table { border-collapse: collapse; background: white; font-size: 13px; margin: 6px 0 12px 0; }
th, td { border: 1px solid #ddd; padding: 5px 9px; text-align: right; white-space: nowrap; }
th { background: #f0f0f0; }
td.l, th.l { text-align: left; }
td.details { white-space: normal; max-width: 320px; text-align: left; color: #555; }
.row { display: flex; flex-wrap: wrap; gap: 24px; align-items: flex-start; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; }
figure { margin: 0; background: white; border: 1px solid #ddd; padding: 4px; }
figure svg { display: block; }
figcaption { font-size: 12px; padding: 2px 8px 6px 8px; color: #333; max-width: 590px; }
.key { margin-right: 14px; white-space: nowrap; }
.fignote { color: #888; display: block; margin-top: 2px; }
.swatch { display: inline-block; width: 10px; height: 10px; margin-right: 6px; border-radius: 2px; }
.good { color: #1a7f37; font-weight: 600; }
.warn { background: #fff4e5; border: 1px solid #f0b429; border-radius: 4px; padding: 8px 12px;
        margin: 8px 0 12px 0; font-size: 13px; max-width: 1100px; }
.warn b { color: #8a4b00; }
.warn ul { margin: 4px 0 0 0; padding-left: 20px; }
td.differs { background: #fff4e5; }
.note { color: #666; font-size: 13px; }
input.xaxis { display: none; }
.toggle { font-size: 13px; margin: 4px 0 8px 0; }
.toggle label { border: 1px solid #bbb; border-radius: 4px; padding: 2px 9px; margin-left: 4px; cursor: pointer;
                background: white; }
#x-step:checked ~ .page label[for=x-step], #x-tokens:checked ~ .page label[for=x-tokens]
  { background: #1f77b4; color: white; border-color: #1f77b4; }
.by-tokens { display: none; }
#x-tokens:checked ~ .page .by-tokens { display: flex; }
#x-tokens:checked ~ .page .by-step { display: none; }
";

/// A chart and the legend printed under it.
struct Figure {
    svg: String,
    legend: Vec<(String, RGBColor)>,
    note: &'static str,
}

impl Figure {
    fn lines(svg: String, series: &[Series], note: &'static str) -> Figure {
        let smoothed = series.iter().any(|s| s.points.len() > SMOOTH_ABOVE);
        let note = if note == NOISY_NOTE && !smoothed {
            ""
        } else {
            note
        };
        Figure {
            svg,
            legend: series.iter().map(|s| (s.label.clone(), s.color)).collect(),
            note,
        }
    }
}

/// A line chart of `series` over `x` with no reference line, with its legend and the note of its style.
fn over_training(
    x: XAxis,
    (title, y_desc): (&str, &str),
    series: &[Series],
    log_y: bool,
    style: LineStyle,
    references: &[Reference],
) -> Result<Figure> {
    let spec = ChartSpec {
        title,
        x_desc: x.desc(),
        y_desc,
        log_y,
        style,
        reference: None,
        references,
    };
    let note = match style {
        _ if !references.is_empty() => BASELINE_NOTE,
        LineStyle::Noisy => NOISY_NOTE,
        LineStyle::Nested => NESTED_NOTE,
    };
    let mut figure = Figure::lines(line_chart(&spec, series)?, series, note);
    figure.legend.extend(
        references
            .iter()
            .map(|r| (format!("– – {}", r.label), r.color)),
    );
    Ok(figure)
}

const NESTED_NOTE: &str = "wider lines are drawn first: curves that coincide show as nested bands";
const NOISY_NOTE: &str = "faint: every logged step; solid: rolling median";
const BASELINE_NOTE: &str =
    "dashed: the run's context-free unigram baseline (a model that ignores context scores this)";

/// What the x axis of the charts over training counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum XAxis {
    Step,
    Tokens,
}

impl XAxis {
    const BOTH: [XAxis; 2] = [XAxis::Step, XAxis::Tokens];

    fn desc(self) -> &'static str {
        match self {
            XAxis::Step => "optimizer step",
            XAxis::Tokens => "training tokens",
        }
    }

    fn class(self) -> &'static str {
        match self {
            XAxis::Step => "by-step",
            XAxis::Tokens => "by-tokens",
        }
    }

    fn of(self, rec: &harness::metrics::Record) -> f64 {
        match self {
            XAxis::Step => rec.step as f64,
            XAxis::Tokens => rec.tokens as f64,
        }
    }
}

/// A chart title and a y-axis title with units for a logged metric.
pub fn metric_axis(metric: &str) -> (String, String) {
    let known = match metric {
        names::STEP_MS => Some(("Step time", "step time (ms)")),
        names::SELECT_MS => Some(("Selection time", "selection time (ms)")),
        names::SELECT_SHARE => Some(("Selection share of the step", "selection / step time")),
        names::TOKENS_PER_S => Some(("Throughput", "tokens / s")),
        "data_wait_ms" => Some(("Waiting for data", "wait per step (ms)")),
        "loss" => Some(("loss", "loss (per token)")),
        "mse" => Some(("mse", "mean squared error (per element)")),
        "fvu" => Some(("fvu", "fraction of variance unexplained")),
        "l0" => Some(("l0", "active latents per token")),
        "dead_fraction" => Some(("Dead latents", "fraction of latents dead")),
        "lr" => Some(("lr", "learning rate")),
        "grad_norm" => Some(("grad_norm", "gradient L2 norm")),
        "threshold" => Some(("threshold", "JumpReLU threshold (activation)")),
        "ef_residual_norm" => Some((
            "Error-feedback residual",
            "L2 norm of the residual after selection",
        )),
        "ef_kept_share" => Some((
            "Gradient mass kept by the top-k",
            "kept share of the squared L2 mass",
        )),
        "eval_loss" => Some(("eval_loss", "held-out loss (nats / token)")),
        names::COMPARE_SELECT_MS => Some((
            "Selection time of the in-run check",
            "checked selector's time (ms)",
        )),
        "wire_bytes" => Some(("Bytes sent per step", "bytes this rank sent")),
        "wire_dense_bytes" => Some((
            "Bytes the dense all-reduce would send",
            "dense gradient bytes per rank",
        )),
        "wire_ratio" => Some(("Wire compression", "dense bytes / bytes sent")),
        "collective_ms" => Some(("Time in collectives", "collective time per step (ms)")),
        _ => None,
    };
    if let Some((title, y)) = known {
        return (title.into(), y.into());
    }
    let unit = if metric.contains("fvu") {
        "fraction of variance unexplained"
    } else if metric.starts_with("ce_loss_recovered") {
        "fraction recovered"
    } else if metric.starts_with("ce_") {
        "cross-entropy (nats / token)"
    } else if metric.contains("l0") {
        "active latents per token"
    } else if metric.ends_with("_ms") {
        "ms"
    } else {
        ""
    };
    let y = if unit.is_empty() {
        metric.to_string()
    } else {
        format!("{metric} ({unit})")
    };
    (metric.to_string(), y)
}

/// Metrics that are one number per run (the context-free baselines of a fine-tune): drawn as dashed
/// reference lines on the chart of the loss they are a baseline for, not as charts of their own.
const BASELINES: [(&str, RecordKind, &str); 2] = [
    ("unigram_entropy", RecordKind::Train, names::LOSS),
    ("unigram_eval_loss", RecordKind::Eval, "eval_loss"),
];

/// The wire metrics of data-parallel runs, charted together.
const WIRE: [&str; 4] = [
    "wire_bytes",
    "wire_dense_bytes",
    "wire_ratio",
    "collective_ms",
];

/// A check of data-parallel runs, not a quantity: never charted.
const WEIGHTS_HASH: &str = "weights_hash";

fn is_baseline(metric: &str) -> bool {
    BASELINES.iter().any(|(b, _, _)| *b == metric)
}

pub fn page(runs: &[RunData], labels: &[String], pairs: &[Pairing]) -> Result<String> {
    let summaries: Vec<RunSummary> = runs
        .iter()
        .zip(labels)
        .map(|(r, l)| summarize(r, l))
        .collect();
    let colors: Vec<_> = (0..runs.len()).map(run_color).collect();
    let series_of = |kind: RecordKind, metric: &str, x: XAxis| -> Vec<Series> {
        runs.iter()
            .enumerate()
            .filter_map(|(i, r)| {
                let points: Vec<(f64, f64)> = r
                    .records
                    .iter()
                    .filter(|rec| rec.kind == kind)
                    .filter_map(|rec| rec.metrics.get(metric).map(|v| (x.of(rec), *v)))
                    .filter(|p| p.1.is_finite())
                    .collect();
                (!points.is_empty()).then(|| Series {
                    label: labels[i].clone(),
                    color: colors[i],
                    points,
                })
            })
            .collect()
    };
    // The baselines drawn on `metric`'s chart: one dashed line per run that logged one.
    let references_of = |kind: RecordKind, metric: &str| -> Vec<Reference> {
        let colors: &[RGBColor] = &colors;
        BASELINES
            .iter()
            .filter(|(_, on_kind, on)| *on_kind == kind && *on == metric)
            .flat_map(|(baseline, _, _)| {
                runs.iter().enumerate().filter_map(move |(i, r)| {
                    let value = r
                        .records
                        .iter()
                        .rev()
                        .find_map(|rec| rec.metrics.get(*baseline).copied())
                        .or_else(|| r.meta.details.get(*baseline).and_then(|v| v.as_f64()))
                        .filter(|v| v.is_finite())?;
                    Some(Reference {
                        y: value,
                        label: format!("{baseline} of {}", labels[i]),
                        color: colors[i],
                    })
                })
            })
            .collect()
    };
    // Step → tokens of a run's train records, for the ratio charts over tokens.
    let tokens_at = |run: &RunData| -> std::collections::BTreeMap<u64, f64> {
        run.train().map(|r| (r.step, r.tokens as f64)).collect()
    };
    let ratio_chart = |title: &str, y_desc: &str, x: XAxis, series: &[Series]| -> Result<Figure> {
        let svg = line_chart(
            &ChartSpec {
                title,
                x_desc: x.desc(),
                y_desc,
                log_y: false,
                style: LineStyle::Noisy,
                reference: Some(1.0),
                references: &[],
            },
            series,
        )?;
        Ok(Figure::lines(svg, series, NOISY_NOTE))
    };

    let mut out = String::new();
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
    out.push_str("<title>sparsetrain run report</title><style>");
    out.push_str(STYLE);
    out.push_str(features::STYLE);
    out.push_str("</style></head><body>\n");
    out.push_str(
        "<input class=\"xaxis\" type=\"radio\" name=\"xaxis\" id=\"x-step\" checked>\
         <input class=\"xaxis\" type=\"radio\" name=\"xaxis\" id=\"x-tokens\">\n<div class=\"page\">\n",
    );
    out.push_str("<h1>sparsetrain run report</h1>\n");
    let _ = writeln!(
        out,
        "<p class=\"sub\">{} run{} · generated {}</p>",
        runs.len(),
        if runs.len() == 1 { "" } else { "s" },
        iso_timestamp(std::time::SystemTime::now())
    );
    warnings_box(&mut out, runs, &summaries, pairs);
    out.push_str(
        "<div class=\"toggle\">x axis of the charts over training: \
         <label for=\"x-step\">step</label><label for=\"x-tokens\">tokens</label></div>\n",
    );

    out.push_str("<h2>Runs</h2>\n");
    run_table(&mut out, runs, &summaries, &colors);

    let speed = speed_ups(pairs, &summaries);
    if !speed.is_empty() {
        out.push_str("<h2>Speed-up of profk</h2>\n");
        speed_up_table(&mut out, &speed, &summaries);
        for x in XAxis::BOTH {
            let mut charts = Vec::new();
            for metric in [names::SELECT_MS, names::STEP_MS] {
                let series: Vec<Series> = speed
                    .iter()
                    .map(|p| {
                        let fast = &runs[p.fast];
                        let tokens = tokens_at(fast);
                        let points = ratio_over_steps(fast, &runs[p.baseline], metric)
                            .into_iter()
                            .filter_map(|(step, r)| match x {
                                XAxis::Step => Some((step, r)),
                                XAxis::Tokens => tokens.get(&(step as u64)).map(|t| (*t, r)),
                            })
                            .collect();
                        Series {
                            label: format!(
                                "{} / {}",
                                summaries[p.baseline].label, summaries[p.fast].label
                            ),
                            color: colors[p.baseline],
                            points,
                        }
                    })
                    .filter(|s| s.points.len() >= 2)
                    .collect();
                if !series.is_empty() {
                    let what = if metric == names::SELECT_MS {
                        "selection"
                    } else {
                        "step"
                    };
                    charts.push(ratio_chart(
                        &format!("Speed-up of profk: {what} time"),
                        &format!("{what} time, other / profk (×)"),
                        x,
                        &series,
                    )?);
                }
            }
            chart_grid(&mut out, &charts, Some(x));
        }
    }
    unpaired_note(&mut out, runs, &summaries, pairs);

    let checks: Vec<(usize, super::summary::InRunCheck)> = runs
        .iter()
        .enumerate()
        .filter_map(|(i, r)| in_run_check(r).map(|c| (i, c)))
        .collect();
    if !checks.is_empty() {
        out.push_str("<h2>Speed-up measured in-run</h2>\n");
        in_run_table(&mut out, &checks, &summaries, &colors);
        let series: Vec<Series> = checks
            .iter()
            .filter(|(_, c)| c.ratios.len() >= 2)
            .map(|(i, c)| Series {
                label: format!("{} / {}", c.compared_with, summaries[*i].label),
                color: colors[*i],
                points: c.ratios.clone(),
            })
            .collect();
        if !series.is_empty() {
            let fig = ratio_chart(
                "Selection speed-up at the in-run checks",
                "selection time, checked selector / run's (×)",
                XAxis::Step,
                &series,
            )?;
            chart_grid(&mut out, &[fig], None);
        }
    }

    let dense = dense_baselines(pairs, &summaries);
    if !dense.is_empty() {
        out.push_str("<h2>Against the dense baseline</h2>\n");
        dense_table(&mut out, &dense, &summaries, &colors);
    }

    out.push_str("<h2>Run context</h2>\n");
    context_table(&mut out, runs, &summaries, &colors);
    provenance_table(&mut out, runs, &summaries, &colors);

    let mut timing_out = String::new();
    timing_out.push_str("<h2>Timing</h2>\n");
    let timing = [
        names::STEP_MS,
        names::SELECT_MS,
        names::SELECT_SHARE,
        names::TOKENS_PER_S,
    ];
    let any_timing = timing
        .iter()
        .any(|m| !series_of(RecordKind::Train, m, XAxis::Step).is_empty());
    for x in XAxis::BOTH {
        let mut charts = Vec::new();
        for metric in timing {
            let series = series_of(RecordKind::Train, metric, x);
            if !series.is_empty() {
                let (title, y_desc) = metric_axis(metric);
                let log_y = wide_spread(&series);
                charts.push(over_training(
                    x,
                    (&title, &y_desc),
                    &series,
                    log_y,
                    LineStyle::Noisy,
                    &[],
                )?);
            }
        }
        chart_grid(&mut timing_out, &charts, Some(x));
    }
    let bars: Vec<_> = summaries
        .iter()
        .zip(&colors)
        .map(|(s, c)| (s.label.clone(), *c, s.median_step_ms, s.median_select_ms))
        .collect();
    if bars.iter().any(|b| b.2.is_some()) {
        let figure = Figure {
            svg: part_of_total_bars("Median step time, selection inside it", "time (ms)", &bars)?,
            legend: bars.iter().map(|b| (b.0.clone(), b.1)).collect(),
            note: "light: median step time; dark: median selection time",
        };
        chart_grid(&mut timing_out, &[figure], None);
    } else if !any_timing {
        timing_out
            .push_str("<p class=\"note\">No step_ms or select_ms metrics in these runs.</p>\n");
    }

    // Data-parallel runs: what each rank put on the wire per step, beside the dense all-reduce.
    if !series_of(RecordKind::Train, WIRE[0], XAxis::Step).is_empty() {
        timing_out.push_str("<h2>Wire</h2>\n");
        let charts = WIRE
            .iter()
            .map(|m| {
                let series = series_of(RecordKind::Train, m, XAxis::Step);
                let (title, y_desc) = metric_axis(m);
                let log_y = wide_spread(&series);
                over_training(
                    XAxis::Step,
                    (&title, &y_desc),
                    &series,
                    log_y,
                    LineStyle::Noisy,
                    &[],
                )
            })
            .collect::<Result<Vec<_>>>()?;
        chart_grid(&mut timing_out, &charts, Some(XAxis::Step));
    }

    let latent_metrics = ["dead_fraction"];
    let train_metrics: Vec<String> = metric_names(runs, RecordKind::Train)
        .into_iter()
        .filter(|m| !timing.contains(&m.as_str()) && !WIRE.contains(&m.as_str()))
        .filter(|m| m != WEIGHTS_HASH)
        .collect();
    if !train_metrics.is_empty() {
        timing_out.push_str("<h2>Training metrics</h2>\n");
        for x in XAxis::BOTH {
            let charts = train_metrics
                .iter()
                .filter(|m| !latent_metrics.contains(&m.as_str()) && !is_baseline(m))
                .map(|m| {
                    let series = series_of(RecordKind::Train, m, x);
                    let (title, y_desc) = metric_axis(m);
                    let log_y = wide_spread(&series);
                    let refs = references_of(RecordKind::Train, m);
                    over_training(
                        x,
                        (&title, &y_desc),
                        &series,
                        log_y,
                        LineStyle::Nested,
                        &refs,
                    )
                })
                .collect::<Result<Vec<_>>>()?;
            chart_grid(&mut timing_out, &charts, Some(x));
        }
        timing_out.push_str("<h3>Last logged training metrics</h3>\n");
        metric_table(&mut timing_out, &train_metrics, &summaries, &colors, |s| {
            &s.final_train
        });
    }

    let eval_metrics = metric_names(runs, RecordKind::Eval);
    if !eval_metrics.is_empty() {
        out.push_str("<h2>Evaluation</h2>\n");
        no_held_out_notes(&mut out, &summaries);
        metric_table(&mut out, &eval_metrics, &summaries, &colors, |s| {
            &s.final_eval
        });
        for x in XAxis::BOTH {
            let mut charts = Vec::new();
            for m in eval_metrics.iter().filter(|m| !is_baseline(m)) {
                let series = series_of(RecordKind::Eval, m, x);
                if series.iter().any(|s| s.points.len() >= 2) {
                    let (_, y_desc) = metric_axis(m);
                    let title = format!("eval {m}");
                    let axes = (title.as_str(), y_desc.as_str());
                    let refs = references_of(RecordKind::Eval, m);
                    charts.push(over_training(
                        x,
                        axes,
                        &series,
                        false,
                        LineStyle::Nested,
                        &refs,
                    )?);
                }
            }
            chart_grid(&mut out, &charts, Some(x));
        }
    } else if runs.iter().any(|r| r.meta.task == "sae") {
        out.push_str(
            "<h2>Evaluation</h2>\n<div class=\"warn\"><b>No evaluation</b>: these runs logged no \
             evaluation record (eval.enabled = false, or the run stopped before its end).</div>\n",
        );
    }

    let with_features: Vec<usize> = (0..runs.len())
        .filter(|&i| runs[i].features.is_some())
        .collect();
    let mut histograms = Vec::new();
    for &i in &with_features {
        if let Some(svg) = runs[i]
            .features
            .as_ref()
            .map(features::histogram_svg)
            .transpose()?
            .flatten()
        {
            histograms.push((svg, i));
        }
    }
    let dead_series = series_of(RecordKind::Train, "dead_fraction", XAxis::Step);
    if !dead_series.is_empty() || !histograms.is_empty() {
        out.push_str("<h2>Latents: dead fraction and density</h2>\n");
        for x in XAxis::BOTH {
            let mut figs = Vec::new();
            let series = series_of(RecordKind::Train, "dead_fraction", x);
            if !series.is_empty() {
                let (title, y_desc) = metric_axis("dead_fraction");
                let mut fig =
                    over_training(x, (&title, &y_desc), &series, false, LineStyle::Nested, &[])?;
                fig.note = "dead: no activation within the aux-k window ([sae.aux] dead_tokens)";
                figs.push(fig);
            }
            for (svg, i) in &histograms {
                figs.push(Figure {
                    svg: svg.clone(),
                    legend: vec![(summaries[*i].label.clone(), colors[*i])],
                    note: "held-out tokens after training; dead latents are not in the histogram",
                });
            }
            chart_grid(&mut out, &figs, Some(x));
        }
    }
    out.push_str(&timing_out);
    if !with_features.is_empty() {
        out.push_str("<section id=\"features\">\n<h2>Feature dashboards</h2>\n");
        let all: Vec<_> = runs.iter().filter_map(|r| r.features.as_ref()).collect();
        features::lookup_box(&mut out, &all);
        for i in with_features {
            if let Some(f) = &runs[i].features {
                features::section(&mut out, &summaries[i].label, f)?;
            }
        }
        out.push_str("</section>\n");
    }
    out.push_str("</div>\n</body></html>\n");
    Ok(out)
}

/// The warning a run's last evaluation calls for when it had no held-out tokens (`heldout_tokens`
/// 0): what was not measured and how to get it.
pub fn no_held_out_warning(final_eval: &harness::metrics::Metrics) -> Option<String> {
    (final_eval.get("heldout_tokens") == Some(&0.0)).then(|| {
        "no held-out evaluation (heldout_tokens 0): heldout_fvu and heldout_l0 were not measured, \
         only the training batches' fvu and l0. For one, set data.held_out_tokens (activations \
         from a model) or data.held_out_dir (shards: extract with --set data.split=heldout)"
            .to_string()
    })
}

fn no_held_out_notes(out: &mut String, summaries: &[RunSummary]) {
    for s in summaries {
        if let Some(w) = no_held_out_warning(&s.final_eval) {
            let _ = writeln!(
                out,
                "<div class=\"warn\"><b>{}</b>: {}</div>",
                escape(&s.label),
                escape(&w)
            );
        }
    }
}

/// Everything that makes a comparison on this page doubtful, at the top: pairings whose runs ran
/// under other conditions or were forced, runs resumed elsewhere, runs without held-out data.
fn warnings_box(out: &mut String, runs: &[RunData], summaries: &[RunSummary], pairs: &[Pairing]) {
    let mut items: Vec<String> = Vec::new();
    for p in pairs {
        let who = format!(
            "{} vs {}",
            summaries[p.run].label, summaries[p.baseline].label
        );
        if p.forced && !p.differences.is_empty() {
            let keys: Vec<&str> = p.differences.iter().map(|d| d.key.as_str()).collect();
            items.push(format!(
                "{who}: paired by --pair though the configs differ in {}",
                keys.join(", ")
            ));
        }
        for w in &p.warnings {
            items.push(format!("{who}: {w}"));
        }
    }
    if pairs.is_empty() {
        items.extend(runs.iter().filter_map(resumed_elsewhere));
    }
    for s in summaries {
        if let Some(w) = no_held_out_warning(&s.final_eval) {
            items.push(format!("{}: {w}", s.label));
        }
    }
    items.dedup();
    if items.is_empty() {
        return;
    }
    out.push_str(
        "<div class=\"warn\"><b>Read before comparing</b>: the runs on this page differ in more than \
         what is compared<ul>",
    );
    for item in items {
        let _ = write!(out, "<li>{}</li>", escape(&item));
    }
    out.push_str("</ul></div>\n");
}

/// Prof-K runs that found no run to compare with: why not, and how to pair them anyway.
fn unpaired_note(out: &mut String, runs: &[RunData], summaries: &[RunSummary], pairs: &[Pairing]) {
    let unpaired = nearest_unpaired(runs, pairs);
    if unpaired.is_empty() {
        return;
    }
    out.push_str("<p class=\"note\">");
    for (a, b, diffs) in unpaired {
        let keys = if diffs.is_empty() {
            "config.json is missing".to_string()
        } else {
            diffs
                .iter()
                .map(|d| format!("{} ({} vs {})", d.key, d.a, d.b))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = write!(
            out,
            "{} is not compared with {}: their configs differ in {}; \
             <code>sparsetrain-report ... --pair {} {}</code> compares them anyway.<br>",
            escape(&summaries[a].label),
            escape(&summaries[b].label),
            escape(&keys),
            escape(&runs[a].dir.display().to_string()),
            escape(&runs[b].dir.display().to_string()),
        );
    }
    out.push_str("</p>\n");
}

/// A speed-up ratio: green only for a pairing whose configs and conditions match.
fn speed_cell(r: Option<f64>, trusted: bool) -> String {
    match r {
        Some(v) if v >= 1.0 && trusted => format!("<span class=\"good\">{v:.2}×</span>"),
        Some(v) if trusted => format!("{v:.2}×"),
        Some(v) => format!("{v:.2}× ⚠"),
        None => "–".into(),
    }
}

/// How a pairing was made, and what differs.
fn pairing_cell(p: &Pairing, about: &str) -> String {
    let mut cell = if p.forced {
        if p.differences.is_empty() {
            "--pair; configs equal".to_string()
        } else {
            format!(
                "--pair; configs differ in {}",
                difference_list(&p.differences)
            )
        }
    } else {
        format!("configs equal outside {about}")
    };
    if !p.warnings.is_empty() {
        cell.push_str("; ⚠ ");
        cell.push_str(&p.warnings.join("; "));
    }
    escape(&cell)
}

fn difference_list(diffs: &[Difference]) -> String {
    diffs
        .iter()
        .map(|d| format!("{} = {} vs {}", d.key, d.a, d.b))
        .collect::<Vec<_>>()
        .join(", ")
}

fn speed_up_table(out: &mut String, pairs: &[SpeedUp], summaries: &[RunSummary]) {
    out.push_str(
        "<table><tr><th class=\"l\">profk run</th><th class=\"l\">compared with</th>\
         <th>step time speed-up</th><th>selection speed-up</th><th class=\"l\">pairing</th></tr>\n",
    );
    for p in pairs {
        let trusted = !p.pairing.forced && p.pairing.warnings.is_empty();
        let _ = writeln!(
            out,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td>\
             <td class=\"details\">{}</td></tr>",
            escape(&summaries[p.fast].label),
            escape(&summaries[p.baseline].label),
            speed_cell(p.step, trusted),
            speed_cell(p.select, trusted),
            pairing_cell(&p.pairing, "selector.*"),
        );
    }
    out.push_str(
        "</table>\n<p class=\"note\">Ratios of median times over all logged steps: \
         other selector / profk (above 1: profk is faster). Runs are paired when their resolved \
         configs are equal outside <code>selector.*</code>; ⚠ marks a pairing whose configs or \
         conditions (host, CPU, GPU, driver, commit, features, model) differ.</p>\n",
    );
}

fn in_run_table(
    out: &mut String,
    checks: &[(usize, super::summary::InRunCheck)],
    summaries: &[RunSummary],
    colors: &[RGBColor],
) {
    out.push_str(
        "<table><tr><th class=\"l\">run</th><th class=\"l\">checked against</th>\
         <th>records with checks</th><th>median select ms</th><th>median checked-selector ms</th>\
         <th>selection speed-up</th></tr>\n",
    );
    for (i, c) in checks {
        let _ = writeln!(
            out,
            "<tr><td class=\"l\">{}{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td></tr>",
            swatch(&colors[*i]),
            escape(&summaries[*i].label),
            escape(&c.compared_with),
            c.records,
            opt(c.select_ms),
            opt(c.compare_ms),
            speed_cell(c.speed_up, true),
        );
    }
    out.push_str(
        "</table>\n<p class=\"note\">Every <code>selector.compare_every</code> steps the run also \
         selected with the checked selector on the same input and required the same elements; the \
         speed-up is the median over the logged records of that selector's time over the run's own \
         (same input, same moment, so no other run is needed). It covers the selection only; the \
         first check also warms the checked selector up, so a run with few checks overstates it.</p>\n",
    );
}

fn dense_table(
    out: &mut String,
    pairs: &[DenseBaseline],
    summaries: &[RunSummary],
    colors: &[RGBColor],
) {
    out.push_str(
        "<table><tr><th class=\"l\">run</th><th class=\"l\">dense baseline</th>\
         <th>median step ms</th><th>dense median step ms</th><th>step time, dense / run</th>\
         <th>last loss</th><th>dense last loss</th><th>eval_loss</th><th>dense eval_loss</th>\
         <th class=\"l\">pairing</th></tr>\n",
    );
    for d in pairs {
        let (a, b) = (&summaries[d.run], &summaries[d.baseline]);
        let metric = |s: &RunSummary, eval: bool, name: &str| {
            let m = if eval { &s.final_eval } else { &s.final_train };
            precise(m.get(name).copied())
        };
        let trusted = !d.pairing.forced && d.pairing.warnings.is_empty();
        let _ = writeln!(
            out,
            "<tr><td class=\"l\">{}{}</td><td class=\"l\">{}{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"details\">{}</td></tr>",
            swatch(&colors[d.run]),
            escape(&a.label),
            swatch(&colors[d.baseline]),
            escape(&b.label),
            opt(a.median_step_ms),
            opt(b.median_step_ms),
            speed_cell(d.step, trusted),
            metric(a, false, names::LOSS),
            metric(b, false, names::LOSS),
            metric(a, true, "eval_loss"),
            metric(b, true, "eval_loss"),
            pairing_cell(&d.pairing, "sparsify.* and selector.*"),
        );
    }
    out.push_str(
        "</table>\n<p class=\"note\">The dense baseline trains the same config with \
         <code>sparsify.mode = \"dense\"</code> (no selection, no error feedback): above 1, the \
         sparsified step is faster; the losses show what sparsification costs.</p>\n",
    );
}

/// Where each run ran: host, CPU, GPUs and driver, build, model weights; cells that differ from the
/// first run's are marked.
fn provenance_table(
    out: &mut String,
    runs: &[RunData],
    summaries: &[RunSummary],
    colors: &[RGBColor],
) {
    type Fact = fn(&harness::provenance::Provenance) -> String;
    const FACTS: [(&str, Fact); 7] = [
        ("host", |p| p.host.clone()),
        ("CPU", |p| p.cpu.clone()),
        ("GPUs", |p| {
            if p.gpus.is_empty() {
                harness::provenance::NONE.into()
            } else {
                p.gpus.join(", ")
            }
        }),
        ("driver", |p| p.gpu_driver.clone()),
        ("commit", |p| p.build.short_commit()),
        ("features", |p| p.build.feature_list()),
        ("model weights", |p| {
            p.model_sha256
                .clone()
                .unwrap_or_else(|| harness::provenance::NONE.into())
        }),
    ];
    out.push_str("<h3>Where the runs ran</h3>\n<table><tr><th class=\"l\">run</th>");
    for (name, _) in FACTS {
        let _ = write!(out, "<th class=\"l\">{name}</th>");
    }
    out.push_str("</tr>\n");
    let first = runs.iter().find_map(|r| r.meta.provenance.as_ref());
    for ((run, s), color) in runs.iter().zip(summaries).zip(colors) {
        let _ = write!(
            out,
            "<tr><td class=\"l\">{}{}</td>",
            swatch(color),
            escape(&s.label)
        );
        match &run.meta.provenance {
            Some(p) => {
                for (_, get) in FACTS {
                    let value = get(p);
                    let differs = first.is_some_and(|f| get(f) != value);
                    let class = if differs { "l differs" } else { "l" };
                    let _ = write!(out, "<td class=\"{class}\">{}</td>", escape(&value));
                }
            }
            None => {
                let _ = write!(
                    out,
                    "<td class=\"l differs\" colspan=\"{}\">not recorded (run.json from before \
                     provenance was recorded)</td>",
                    FACTS.len()
                );
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

/// What ran where, from each run's resolved config: device, model, hook, architecture, n, k, batch B.
fn context_table(
    out: &mut String,
    runs: &[RunData],
    summaries: &[RunSummary],
    colors: &[RGBColor],
) {
    const COLUMNS: [(&str, &[&str]); 10] = [
        ("device", &["/device"]),
        ("model", &["/data/model", "/model/name", "/model"]),
        ("hook", &["/data/hook"]),
        ("layers", &["/data/layers"]),
        ("arch", &["/sae/arch"]),
        ("n (latents)", &["/sae/latents"]),
        ("k", &["/sae/k", "/sparsify/k", "/topk/k"]),
        ("B (tokens / batch)", &["/train/batch_size"]),
        ("context", &["/data/context"]),
        ("precision", &["/train/precision"]),
    ];
    out.push_str("<table><tr><th class=\"l\">run</th>");
    for (name, _) in COLUMNS {
        let _ = write!(out, "<th class=\"l\">{name}</th>");
    }
    out.push_str("</tr>\n");
    for ((run, s), color) in runs.iter().zip(summaries).zip(colors) {
        let _ = write!(
            out,
            "<tr><td class=\"l\">{}{}</td>",
            swatch(color),
            escape(&s.label)
        );
        for (name, pointers) in COLUMNS {
            let from_meta = run.meta.details.get(name.split(' ').next().unwrap_or(name));
            let value = pointers
                .iter()
                .find_map(|p| run.config.as_ref().and_then(|c| c.pointer(p)))
                .or(from_meta);
            let _ = write!(out, "<td class=\"l\">{}</td>", escape(&config_value(value)));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

fn config_value(v: Option<&serde_json::Value>) -> String {
    match v {
        None | Some(serde_json::Value::Null) => "–".into(),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Number(n)) => match n.as_u64() {
            Some(u) => group_digits(u),
            None => n.to_string(),
        },
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .map(|i| config_value(Some(i)))
            .collect::<Vec<_>>()
            .join(", "),
        Some(other) => other.to_string(),
    }
}

/// A log axis pays off when a chart spans more than a factor of 30.
fn wide_spread(series: &[Series]) -> bool {
    let values = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let (lo, hi) = values.fold((f64::INFINITY, 0.0_f64), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    lo > 0.0 && hi / lo > 30.0
}

/// A row of charts; `x` marks the row as one of the two x-axis variants the toggle switches between.
fn chart_grid(out: &mut String, charts: &[Figure], x: Option<XAxis>) {
    if charts.is_empty() {
        return;
    }
    match x {
        Some(x) => {
            let _ = writeln!(out, "<div class=\"charts {}\">", x.class());
        }
        None => out.push_str("<div class=\"charts\">\n"),
    }
    for figure in charts {
        let legend: String = figure
            .legend
            .iter()
            .map(|(label, color)| {
                format!(
                    "<span class=\"key\">{}{}</span>",
                    swatch(color),
                    escape(label)
                )
            })
            .collect();
        let note =
            if figure.note.is_empty() || figure.legend.len() < 2 && figure.note == NESTED_NOTE {
                String::new()
            } else {
                format!("<span class=\"fignote\">{}</span>", figure.note)
            };
        let _ = writeln!(
            out,
            "<figure>{}<figcaption>{legend}{note}</figcaption></figure>",
            figure.svg
        );
    }
    out.push_str("</div>\n");
}

fn swatch(color: &RGBColor) -> String {
    format!(
        "<span class=\"swatch\" style=\"background:#{:02x}{:02x}{:02x}\"></span>",
        color.0, color.1, color.2
    )
}

fn run_table(out: &mut String, runs: &[RunData], summaries: &[RunSummary], colors: &[RGBColor]) {
    out.push_str(
        "<table><tr><th class=\"l\">run</th><th class=\"l\">directory</th><th class=\"l\">config</th>\
         <th class=\"l\">selector</th><th class=\"l\">task</th><th>steps</th><th>tokens</th>\
         <th>wall time</th><th>median step ms</th><th>median select ms</th><th>select share</th>\
         <th>tokens/s</th><th class=\"l\">details</th></tr>\n",
    );
    for ((run, s), color) in runs.iter().zip(summaries).zip(colors) {
        let details: Vec<String> = run
            .meta
            .details
            .iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(text) => format!("{k}={text}"),
                other => format!("{k}={other}"),
            })
            .collect();
        let dir = run
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "<tr><td class=\"l\">{}{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td>\
             <td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td class=\"details\">{}</td></tr>",
            swatch(color),
            escape(&s.label),
            escape(&dir),
            escape(&run.meta.config_name),
            escape(&run.meta.selector),
            escape(&run.meta.task),
            s.steps,
            group_digits(s.tokens),
            duration(s.wall_s),
            opt(s.median_step_ms),
            opt(s.median_select_ms),
            s.select_share.map_or("–".into(), |v| format!("{:.1} %", 100.0 * v)),
            s.median_tokens_per_s.map_or("–".into(), |v| group_digits(v.round() as u64)),
            escape(&details.join(", ")),
        );
    }
    out.push_str("</table>\n");
}

/// Rows: metrics; columns: runs.
fn metric_table(
    out: &mut String,
    metrics: &[String],
    summaries: &[RunSummary],
    colors: &[RGBColor],
    pick: impl Fn(&RunSummary) -> &harness::metrics::Metrics,
) {
    out.push_str("<table><tr><th class=\"l\">metric</th>");
    for (s, c) in summaries.iter().zip(colors) {
        let _ = write!(out, "<th>{}{}</th>", swatch(c), escape(&s.label));
    }
    out.push_str("</tr>\n");
    for m in metrics {
        let _ = write!(out, "<tr><td class=\"l\">{}</td>", escape(m));
        for s in summaries {
            let _ = write!(out, "<td>{}</td>", precise(pick(s).get(m).copied()));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

fn opt(v: Option<f64>) -> String {
    v.map_or("–".into(), number)
}

/// Six significant digits, for tables of metrics whose runs differ in the fourth (CE losses).
fn precise(v: Option<f64>) -> String {
    let Some(v) = v else {
        return "–".into();
    };
    let a = v.abs();
    if !v.is_finite() || a == 0.0 || a >= 1e5 {
        return number(v);
    }
    if a < 1e-3 {
        return format!("{v:.5e}");
    }
    let decimals = (5 - a.log10().floor() as i32).max(0) as usize;
    format!("{v:.decimals$}")
}

/// Four significant digits, digit groups for large values, NaN spelled out.
pub fn number(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.into();
    }
    let a = v.abs();
    if a >= 1e5 {
        let sign = if v < 0.0 { "-" } else { "" };
        return format!("{sign}{}", group_digits(a.round() as u64));
    }
    if a == 0.0 {
        return "0".into();
    }
    if a < 1e-3 {
        return format!("{v:.3e}");
    }
    let decimals = (3 - a.log10().floor() as i32).max(0) as usize;
    format!("{v:.decimals$}")
}

fn group_digits(n: u64) -> String {
    let digits = n.to_string();
    let mut grouped = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            grouped.push('\u{202f}');
        }
        grouped.push(c);
    }
    grouped
}

fn duration(secs: f64) -> String {
    if !secs.is_finite() {
        return "–".into();
    }
    let s = secs.round() as u64;
    match s {
        0..=59 => format!("{secs:.1} s"),
        60..=3599 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// HTML-escapes text (labels and names come from user configs).
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_escaping() {
        assert_eq!(number(1.23456), "1.235");
        assert_eq!(number(123.456), "123.5");
        assert_eq!(number(f64::NAN), "NaN");
        assert_eq!(number(0.0), "0");
        assert_eq!(number(1234567.0), "1\u{202f}234\u{202f}567");
        assert_eq!(escape("<a & 'b'>"), "&lt;a &amp; &#39;b&#39;&gt;");
        assert_eq!(duration(75.0), "1m 15s");
        assert_eq!(precise(Some(10.845123)), "10.8451");
        assert_eq!(precise(Some(0.93451234)), "0.934512");
        assert_eq!(precise(Some(0.00012345678)), "1.23457e-4");
        assert_eq!(precise(None), "–");
    }
}
