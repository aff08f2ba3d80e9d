//! Page assembly: sections, tables and charts, with all text escaped.

use super::features;
use super::plots::{
    line_chart, part_of_total_bars, selector_color, ChartSpec, LineStyle, Series, SMOOTH_ABOVE,
};
use super::summary::{metric_names, ratio_over_steps, speed_ups, summarize, RunSummary, SpeedUp};
use super::RunData;
use crate::error::Result;
use crate::metrics::{names, RecordKind};
use crate::run_dir::iso_timestamp;
use plotters::style::RGBColor;
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
) -> Result<Figure> {
    let spec = ChartSpec {
        title,
        x_desc: x.desc(),
        y_desc,
        log_y,
        style,
        reference: None,
    };
    let note = match style {
        LineStyle::Noisy => NOISY_NOTE,
        LineStyle::Nested => NESTED_NOTE,
    };
    Ok(Figure::lines(line_chart(&spec, series)?, series, note))
}

const NESTED_NOTE: &str = "wider lines are drawn first: curves that coincide show as nested bands";
const NOISY_NOTE: &str = "faint: every logged step; solid: rolling median";

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

    fn of(self, rec: &crate::metrics::Record) -> f64 {
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

pub fn page(runs: &[RunData], labels: &[String]) -> Result<String> {
    let summaries: Vec<RunSummary> = runs
        .iter()
        .zip(labels)
        .map(|(r, l)| summarize(r, l))
        .collect();
    let colors: Vec<_> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| selector_color(&r.meta.selector, i))
        .collect();
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
    // Step → tokens of a run's train records, for the ratio charts over tokens.
    let tokens_at = |run: &RunData| -> std::collections::BTreeMap<u64, f64> {
        run.train().map(|r| (r.step, r.tokens as f64)).collect()
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
    out.push_str(
        "<div class=\"toggle\">x axis of the charts over training: \
         <label for=\"x-step\">step</label><label for=\"x-tokens\">tokens</label></div>\n",
    );

    out.push_str("<h2>Runs</h2>\n");
    run_table(&mut out, runs, &summaries, &colors);

    let pairs = speed_ups(runs, &summaries);
    if !pairs.is_empty() {
        out.push_str("<h2>Speed-up of profk</h2>\n<div class=\"row\"><div>");
        speed_up_table(&mut out, &pairs, &summaries);
        out.push_str("</div><div>");
        context_table(&mut out, runs, &summaries, &colors);
        out.push_str("</div></div>\n");
        for x in XAxis::BOTH {
            let mut charts = Vec::new();
            for metric in [names::SELECT_MS, names::STEP_MS] {
                let series: Vec<Series> = pairs
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
                    let svg = line_chart(
                        &ChartSpec {
                            title: &format!("Speed-up of profk: {what} time"),
                            x_desc: x.desc(),
                            y_desc: &format!("{what} time, other / profk (×)"),
                            log_y: false,
                            style: LineStyle::Noisy,
                            reference: Some(1.0),
                        },
                        &series,
                    )?;
                    charts.push(Figure::lines(svg, &series, NOISY_NOTE));
                }
            }
            chart_grid(&mut out, &charts, Some(x));
        }
    } else {
        out.push_str("<h2>Run context</h2>\n");
        context_table(&mut out, runs, &summaries, &colors);
    }

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
            legend: Vec::new(),
            note: "light: median step time; dark: median selection time",
        };
        chart_grid(&mut timing_out, &[figure], None);
    } else if !any_timing {
        timing_out
            .push_str("<p class=\"note\">No step_ms or select_ms metrics in these runs.</p>\n");
    }

    let latent_metrics = ["dead_fraction"];
    let train_metrics: Vec<String> = metric_names(runs, RecordKind::Train)
        .into_iter()
        .filter(|m| !timing.contains(&m.as_str()))
        .collect();
    if !train_metrics.is_empty() {
        timing_out.push_str("<h2>Training metrics</h2>\n");
        for x in XAxis::BOTH {
            let charts = train_metrics
                .iter()
                .filter(|m| !latent_metrics.contains(&m.as_str()))
                .map(|m| {
                    let series = series_of(RecordKind::Train, m, x);
                    let (title, y_desc) = metric_axis(m);
                    let log_y = wide_spread(&series);
                    over_training(x, (&title, &y_desc), &series, log_y, LineStyle::Nested)
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
        metric_table(&mut out, &eval_metrics, &summaries, &colors, |s| {
            &s.final_eval
        });
        for x in XAxis::BOTH {
            let mut charts = Vec::new();
            for m in &eval_metrics {
                let series = series_of(RecordKind::Eval, m, x);
                if series.iter().any(|s| s.points.len() >= 2) {
                    let (_, y_desc) = metric_axis(m);
                    let title = format!("eval {m}");
                    let axes = (title.as_str(), y_desc.as_str());
                    charts.push(over_training(x, axes, &series, false, LineStyle::Nested)?);
                }
            }
            chart_grid(&mut out, &charts, Some(x));
        }
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
                    over_training(x, (&title, &y_desc), &series, false, LineStyle::Nested)?;
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

fn speed_up_table(out: &mut String, pairs: &[SpeedUp], summaries: &[RunSummary]) {
    out.push_str(
        "<table><tr><th class=\"l\">config</th><th class=\"l\">profk run</th><th class=\"l\">compared with</th>\
         <th>step time speed-up</th><th>selection speed-up</th></tr>\n",
    );
    let ratio = |r: Option<f64>| match r {
        Some(v) if v >= 1.0 => format!("<span class=\"good\">{v:.2}×</span>"),
        Some(v) => format!("{v:.2}×"),
        None => "–".into(),
    };
    for p in pairs {
        let _ = writeln!(
            out,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td></tr>",
            escape(&p.config),
            escape(&summaries[p.fast].label),
            escape(&summaries[p.baseline].label),
            ratio(p.step),
            ratio(p.select),
        );
    }
    out.push_str(
        "</table>\n<p class=\"note\">Ratios of median times over all logged steps: \
         other selector / profk (above 1: profk is faster).</p>\n",
    );
}

/// Rows: metrics; columns: runs.
fn metric_table(
    out: &mut String,
    metrics: &[String],
    summaries: &[RunSummary],
    colors: &[RGBColor],
    pick: impl Fn(&RunSummary) -> &crate::metrics::Metrics,
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
