//! SVG charts (plotters, SVG backend): lines over steps and per-run bars, returned as SVG text.

use harness::error::{Error, Result};
use plotters::chart::MeshStyle;
use plotters::coord::ranged1d::{
    AsRangedCoord, DefaultFormatting, KeyPointHint, Ranged, ValueFormatter,
};
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::{coord::Shift, prelude::*};
use std::ops::Range;

pub const WIDTH: u32 = 600;
pub const HEIGHT: u32 = 350;
/// Longer series are averaged into this many points: the SVG stays small, the shape stays.
const MAX_POINTS: usize = 600;

/// Noisy series longer than this get a rolling median drawn over them.
pub const SMOOTH_ABOVE: usize = 60;

/// How the lines of a chart are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineStyle {
    /// Noisy measurements (step times): the raw line faint, a rolling median over it.
    Noisy,
    /// Training curves: earlier series drawn wider, so curves that coincide (exact selectors train
    /// identically) stay visible as nested bands.
    Nested,
}

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Series {
    pub label: String,
    pub color: RGBColor,
    pub points: Vec<(f64, f64)>,
}

/// The colour of the run at `index` on the page: one per run, so that two runs of one selector stay
/// apart in every chart (Tableau 10, then darker shades of it).
pub fn run_color(index: usize) -> RGBColor {
    const PALETTE: [RGBColor; 10] = [
        RGBColor(0x1f, 0x77, 0xb4),
        RGBColor(0xff, 0x7f, 0x0e),
        RGBColor(0x2c, 0xa0, 0x2c),
        RGBColor(0xd6, 0x27, 0x28),
        RGBColor(0x94, 0x67, 0xbd),
        RGBColor(0x8c, 0x56, 0x4b),
        RGBColor(0xe3, 0x77, 0xc2),
        RGBColor(0x7f, 0x7f, 0x7f),
        RGBColor(0xbc, 0xbd, 0x22),
        RGBColor(0x17, 0xbe, 0xcf),
    ];
    let RGBColor(r, g, b) = PALETTE[index % PALETTE.len()];
    // Each further round of the palette darker by a third, so colours stay distinct past ten runs.
    let round = (index / PALETTE.len()) as u32;
    let shade = |c: u8| (u32::from(c) * 2u32.pow(round) / 3u32.pow(round).max(1)) as u8;
    if round == 0 {
        RGBColor(r, g, b)
    } else {
        RGBColor(shade(r), shade(g), shade(b))
    }
}

/// The colour of charts that show no run (histograms).
const NEUTRAL: RGBColor = RGBColor(0x1f, 0x77, 0xb4);

/// A dashed horizontal line with its legend entry (a run's baseline on a loss chart).
#[derive(Debug, Clone)]
pub struct Reference {
    pub y: f64,
    pub label: String,
    pub color: RGBColor,
}

fn plot_err<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> Error {
    Error::Report(format!("drawing a chart: {e}"))
}

type Canvas<'s> = DrawingArea<SVGBackend<'s>, Shift>;

/// The SVG text of a chart that `draw` puts on a white canvas of the house size.
fn svg_chart(draw: impl FnOnce(&Canvas) -> Result<()>) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        draw(&root)?;
        root.present().map_err(plot_err)?;
    }
    Ok(svg)
}

/// The captioned frame every chart shares, with room for `x_label_area` pixels of x labels.
fn frame<'a, 's>(
    root: &'a Canvas<'s>,
    title: &str,
    x_label_area: u32,
) -> ChartBuilder<'a, 'static, SVGBackend<'s>> {
    let mut builder = ChartBuilder::on(root);
    builder
        .caption(title, ("sans-serif", 17))
        .margin(12)
        .x_label_area_size(x_label_area)
        .y_label_area_size(64);
    builder
}

/// The grid and label styles every chart shares.
fn house_style<'m, 'a, 'b, 's, X: Ranged, Y: Ranged>(
    mesh: &'m mut MeshStyle<'a, 'b, X, Y, SVGBackend<'s>>,
) -> &'m mut MeshStyle<'a, 'b, X, Y, SVGBackend<'s>> {
    mesh.light_line_style(RGBColor(0xee, 0xee, 0xee))
        .bold_line_style(RGBColor(0xd8, 0xd8, 0xd8))
        .label_style(("sans-serif", 12))
        .axis_desc_style(("sans-serif", 13))
}

/// What a line chart shows besides its series.
#[derive(Debug, Clone, Copy)]
pub struct ChartSpec<'a> {
    pub title: &'a str,
    /// Axis titles, with units.
    pub x_desc: &'a str,
    pub y_desc: &'a str,
    /// A log y axis (ticks at each decade) when every value is positive.
    pub log_y: bool,
    pub style: LineStyle,
    /// A dashed horizontal line kept inside the y range (y = 1 on ratio charts).
    pub reference: Option<f64>,
    /// Dashed horizontal lines in the colour of their run, kept inside the y range.
    pub references: &'a [Reference],
}

/// A line chart of `series` over x.
pub fn line_chart(spec: &ChartSpec, series: &[Series]) -> Result<String> {
    let title = spec.title;
    let series: Vec<Series> = series
        .iter()
        .map(|s| Series {
            points: downsample(
                s.points
                    .iter()
                    .copied()
                    .filter(|(x, y)| x.is_finite() && y.is_finite())
                    .collect(),
            ),
            ..s.clone()
        })
        .collect();
    let xs = bounds(series.iter().flat_map(|s| s.points.iter().map(|p| p.0)));
    let ys = bounds(
        series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .chain(spec.reference)
            .chain(
                spec.references
                    .iter()
                    .map(|r| r.y)
                    .filter(|y| y.is_finite()),
            ),
    );
    let (Some(xs), Some(ys)) = (xs, ys) else {
        return Err(Error::Report(format!(
            "chart {title:?} has no finite points"
        )));
    };
    let x_range = pad_range(xs, false);
    let mut labels = Labels {
        title,
        x_desc: spec.x_desc,
        y_desc: spec.y_desc,
        y_decimals: None,
        reference: spec.reference,
        references: spec.references,
    };
    if spec.log_y && ys.start > 0.0 {
        let (lo, hi) = (ys.start / 1.25, ys.end * 1.25);
        let y_spec = ticked((lo..hi).log_scale(), decade_ticks(lo, hi));
        draw_lines(labels, &series, spec.style, x_range, y_spec)
    } else {
        let y_range = pad_range(ys, true);
        labels.y_decimals = axis_decimals(&y_range);
        draw_lines(labels, &series, spec.style, x_range, y_range)
    }
}

/// Tick values of a log axis over [lo, hi]: every power of ten inside, and 2× and 5× of them too when
/// the range holds fewer than three decades' ticks.
pub fn decade_ticks(lo: f64, hi: f64) -> Vec<f64> {
    if !(lo > 0.0 && hi >= lo && hi.is_finite()) {
        return Vec::new();
    }
    let (first, last) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let inside = |v: &f64| *v >= lo * (1.0 - 1e-9) && *v <= hi * (1.0 + 1e-9);
    let decades: Vec<f64> = (first..=last)
        .map(|e| times_pow10(1.0, e))
        .filter(inside)
        .collect();
    if decades.len() >= 3 {
        return decades;
    }
    (first..=last)
        .flat_map(|e| [1.0, 2.0, 5.0].map(|m| times_pow10(m, e)))
        .filter(inside)
        .collect()
}

/// An axis with the given ticks (plotters' `WithKeyPoints` keeps the inner axis' formatting option,
/// which the mesh of an f64 axis then rejects).
pub struct Ticked<R> {
    inner: R,
    ticks: Vec<f64>,
}

fn ticked<S>(spec: S, ticks: Vec<f64>) -> Ticked<S::CoordDescType>
where
    S: AsRangedCoord<Value = f64>,
{
    Ticked {
        inner: spec.into(),
        ticks,
    }
}

impl<R: Ranged<ValueType = f64>> Ranged for Ticked<R> {
    type ValueType = f64;
    type FormatOption = DefaultFormatting;

    fn range(&self) -> Range<f64> {
        self.inner.range()
    }

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn axis_pixel_range(&self, limit: (i32, i32)) -> Range<i32> {
        self.inner.axis_pixel_range(limit)
    }
}

/// m · 10^e, rounded once (so 10^-2 is the literal 0.01).
fn times_pow10(m: f64, e: i32) -> f64 {
    if e >= 0 {
        m * 10f64.powi(e)
    } else {
        m / 10f64.powi(-e)
    }
}

/// A tick label for 10^e: "0.01", "1", "100" near 1, "1e-5" / "1e6" further away.
pub fn decade_label(e: i32) -> String {
    if (-3..=4).contains(&e) {
        short_number(times_pow10(1.0, e))
    } else {
        format!("1e{e}")
    }
}

/// Bars of latent counts over log10-density bins (`edges` one longer than `counts`), ticked at each
/// decade.
pub fn density_histogram(title: &str, edges: &[f64], counts: &[u64]) -> Result<String> {
    if edges.len() != counts.len() + 1 || counts.is_empty() {
        return Err(Error::Report(format!(
            "chart {title:?}: {} bin edges for {} counts",
            edges.len(),
            counts.len()
        )));
    }
    let (lo, hi) = (edges[0], edges[edges.len() - 1]);
    let top = counts.iter().copied().max().unwrap_or(0).max(1) as f64;
    let decades: Vec<f64> = (lo.ceil() as i32..=hi.floor() as i32)
        .map(f64::from)
        .collect();
    svg_chart(|root| {
        let mut chart = frame(root, title, 42)
            .build_cartesian_2d(ticked(lo..hi, decades), 0.0..top * 1.1)
            .map_err(plot_err)?;
        house_style(
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_desc("density: fraction of tokens a latent fires on (log scale)")
                .y_desc("latents")
                .x_label_formatter(&|v| decade_label(v.round() as i32))
                .y_label_formatter(&|v| short_number(*v)),
        )
        .draw()
        .map_err(plot_err)?;
        let color = NEUTRAL;
        let bars = counts.iter().enumerate().map(|(i, &c)| {
            Rectangle::new([(edges[i], 0.0), (edges[i + 1], c as f64)], color.filled())
        });
        chart.draw_series(bars).map_err(plot_err)?;
        Ok(())
    })
}

struct Labels<'a> {
    title: &'a str,
    x_desc: &'a str,
    y_desc: &'a str,
    /// Fixed decimals for a linear axis, so neighbouring ticks never print alike.
    y_decimals: Option<usize>,
    reference: Option<f64>,
    references: &'a [Reference],
}

/// Decimals that tell apart ticks about a tenth of the range apart; `None` where large or tiny values
/// read better with a k/M suffix or in scientific notation.
pub fn axis_decimals(range: &Range<f64>) -> Option<usize> {
    let top = range.start.abs().max(range.end.abs());
    if !(1e-3..1e4).contains(&top) {
        return None;
    }
    let tick = (range.end - range.start) / 10.0;
    Some((-tick.log10()).ceil().clamp(0.0, 8.0) as usize)
}

fn draw_lines<Y>(
    labels: Labels,
    series: &[Series],
    style: LineStyle,
    x_range: Range<f64>,
    y_spec: Y,
) -> Result<String>
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    svg_chart(|root| {
        let mut chart = frame(root, labels.title, 42)
            .build_cartesian_2d(x_range.clone(), y_spec)
            .map_err(plot_err)?;
        house_style(
            chart
                .configure_mesh()
                .x_desc(labels.x_desc)
                .y_desc(labels.y_desc)
                .x_labels(8)
                .y_labels(8)
                .x_label_formatter(&|v| short_number(*v))
                .y_label_formatter(&|v| match labels.y_decimals {
                    Some(decimals) => format!("{v:.decimals$}"),
                    None if v.abs() < 1e-3 && *v != 0.0 => format!("{v:.2e}"),
                    None => short_number(*v),
                }),
        )
        .draw()
        .map_err(plot_err)?;
        if let Some(y) = labels.reference {
            let (x0, x1) = (x_range.start, x_range.end);
            let dash =
                DashedLineSeries::new([(x0, y), (x1, y)], 6, 4, BLACK.mix(0.6).stroke_width(1));
            chart.draw_series(dash).map_err(plot_err)?;
        }
        for r in labels.references {
            let (x0, x1) = (x_range.start, x_range.end);
            let dash = DashedLineSeries::new(
                [(x0, r.y), (x1, r.y)],
                8,
                5,
                r.color.mix(0.9).stroke_width(2),
            );
            chart.draw_series(dash).map_err(plot_err)?;
        }
        let n = series.len();
        for (i, s) in series.iter().enumerate() {
            let color = s.color;
            match style {
                LineStyle::Noisy if s.points.len() > SMOOTH_ABOVE => {
                    let faint =
                        LineSeries::new(s.points.iter().copied(), color.mix(0.3).stroke_width(1));
                    chart.draw_series(faint).map_err(plot_err)?;
                    let smooth = rolling_median(&s.points, (s.points.len() / 40).max(3));
                    let line = LineSeries::new(smooth, color.stroke_width(2));
                    chart.draw_series(line).map_err(plot_err)?;
                }
                LineStyle::Noisy => {
                    let line = LineSeries::new(s.points.iter().copied(), color.stroke_width(2));
                    chart.draw_series(line).map_err(plot_err)?;
                }
                LineStyle::Nested => {
                    let width = 2 + 2 * (n - 1 - i) as u32;
                    let line = LineSeries::new(s.points.iter().copied(), color.stroke_width(width));
                    chart.draw_series(line).map_err(plot_err)?;
                }
            }
            if s.points.len() <= 40 {
                chart
                    .draw_series(s.points.iter().map(|p| Circle::new(*p, 3, color.filled())))
                    .map_err(plot_err)?;
            }
        }
        Ok(())
    })
}

/// One bar per run of `total` (e.g. median step ms), light, with `part` (e.g. median select ms) drawn
/// dark inside it from the bottom, so the part's share of the total shows at a glance.
pub fn part_of_total_bars(
    title: &str,
    y_desc: &str,
    bars: &[(String, RGBColor, Option<f64>, Option<f64>)],
) -> Result<String> {
    let top = bars
        .iter()
        .flat_map(|b| [b.2, b.3])
        .flatten()
        .filter(|v| v.is_finite())
        .fold(0.0_f64, f64::max);
    if top <= 0.0 {
        return Err(Error::Report(format!(
            "chart {title:?} has nothing to show"
        )));
    }
    let width = bars.len().max(1) as f64;
    svg_chart(|root| {
        let mut chart = frame(root, title, 30)
            .build_cartesian_2d(0.0..width, 0.0..top * 1.15)
            .map_err(plot_err)?;
        house_style(
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(0)
                .y_desc(y_desc)
                .y_label_formatter(&|v| short_number(*v)),
        )
        .draw()
        .map_err(plot_err)?;
        let rect = |i: usize, value: f64, style: ShapeStyle| {
            let x = i as f64;
            Rectangle::new([(x + 0.2, 0.0), (x + 0.8, value)], style)
        };
        let totals = bars.iter().enumerate().filter_map(|(i, b)| {
            b.2.filter(|v| v.is_finite())
                .map(|v| rect(i, v, b.1.mix(0.35).filled()))
        });
        chart.draw_series(totals).map_err(plot_err)?;
        let parts = bars.iter().enumerate().filter_map(|(i, b)| {
            b.3.filter(|v| v.is_finite())
                .map(|v| rect(i, v, b.1.filled()))
        });
        chart.draw_series(parts).map_err(plot_err)?;
        let centered = |anchor: VPos| {
            ("sans-serif", 12)
                .into_font()
                .color(&BLACK)
                .pos(Pos::new(HPos::Center, anchor))
        };
        let values = bars.iter().enumerate().filter_map(|(i, b)| {
            b.2.filter(|v| v.is_finite()).map(|v| {
                Text::new(
                    short_number(v),
                    (i as f64 + 0.5, v + top * 0.01),
                    centered(VPos::Bottom),
                )
            })
        });
        chart.draw_series(values).map_err(plot_err)?;
        // Run names under the axis: outside the plotting area, so drawn on the whole canvas.
        for (i, bar) in bars.iter().enumerate() {
            let (x, y) = chart.backend_coord(&(i as f64 + 0.5, 0.0));
            root.draw(&Text::new(bar.0.clone(), (x, y + 8), centered(VPos::Top)))
                .map_err(plot_err)?;
        }
        Ok(())
    })
}

fn bounds(values: impl Iterator<Item = f64>) -> Option<Range<f64>> {
    values.fold(None, |acc: Option<Range<f64>>, v| match acc {
        None => Some(v..v),
        Some(r) => Some(r.start.min(v)..r.end.max(v)),
    })
}

/// Below this span relative to the values' magnitude, a series is flat: what varies is float noise.
const FLAT_RELATIVE_SPAN: f64 = 1e-3;

/// Adds a margin around the data; a range from zero when the data is non-negative and starts low
/// enough that zero keeps the picture honest. A flat range (a span under a thousandth of the values)
/// is widened to ±5 % around its middle, so the line reads as flat and the ticks as a few round numbers
/// instead of float noise.
pub fn pad_range(r: Range<f64>, from_zero_if_positive: bool) -> Range<f64> {
    let span = r.end - r.start;
    let magnitude = r.start.abs().max(r.end.abs());
    if span <= FLAT_RELATIVE_SPAN * magnitude || magnitude == 0.0 {
        if magnitude == 0.0 {
            return if from_zero_if_positive {
                0.0..1.0
            } else {
                -1.0..1.0
            };
        }
        let mid = 0.5 * (r.start + r.end);
        let half = 0.05 * mid.abs();
        let start = if from_zero_if_positive && mid > 0.0 {
            (mid - half).max(0.0)
        } else {
            mid - half
        };
        return start..(mid + half);
    }
    let start = if from_zero_if_positive && r.start >= 0.0 && r.start < 0.5 * r.end {
        0.0
    } else {
        r.start - 0.05 * span
    };
    start..(r.end + 0.05 * span)
}

/// Averages consecutive points into at most MAX_POINTS.
fn downsample(points: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    if points.len() <= MAX_POINTS {
        return points;
    }
    let per = points.len().div_ceil(MAX_POINTS);
    points
        .chunks(per)
        .map(|c| {
            let n = c.len() as f64;
            (
                c.iter().map(|p| p.0).sum::<f64>() / n,
                c.iter().map(|p| p.1).sum::<f64>() / n,
            )
        })
        .collect()
}

/// Rolling median of the y values over `window` points, for a readable line through noisy timings.
fn rolling_median(points: &[(f64, f64)], window: usize) -> Vec<(f64, f64)> {
    let half = window / 2;
    (0..points.len())
        .map(|i| {
            let lo = i.saturating_sub(half);
            let hi = (i + half + 1).min(points.len());
            let mut ys: Vec<f64> = points[lo..hi].iter().map(|p| p.1).collect();
            ys.sort_by(f64::total_cmp);
            (points[i].0, ys[ys.len() / 2])
        })
        .collect()
}

/// Axis labels: 12000 → "12k", 1500000 → "1.5M", 0.0012 → "0.0012"; trailing zeros dropped.
pub fn short_number(v: f64) -> String {
    let a = v.abs();
    let (scaled, suffix) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e4 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let decimals = if a == 0.0 || a >= 1.0 {
        2
    } else {
        (-a.log10()).floor() as usize + 3
    };
    let text = format!("{scaled:.decimals$}");
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        &text
    };
    format!("{text}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_numbers() {
        assert_eq!(short_number(12_000.0), "12k");
        assert_eq!(short_number(1_500_000.0), "1.5M");
        assert_eq!(short_number(250.0), "250");
        assert_eq!(short_number(0.126), "0.126");
        assert_eq!(short_number(0.0012), "0.0012");
        assert_eq!(short_number(0.0), "0");
        assert_eq!(short_number(35.0), "35");
    }

    #[test]
    fn log_ticks_at_each_decade() {
        assert_eq!(decade_ticks(0.003, 20.0), vec![0.01, 0.1, 1.0, 10.0]);
        assert_eq!(
            decade_ticks(1e-5, 1.0),
            vec![1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0]
        );
        // Less than three decades: 1-2-5 ticks.
        assert_eq!(decade_ticks(0.4, 3.0), vec![0.5, 1.0, 2.0]);
        assert_eq!(decade_ticks(15.0, 120.0), vec![20.0, 50.0, 100.0]);
        assert!(decade_ticks(0.0, 1.0).is_empty());
        assert!(decade_ticks(2.0, 1.0).is_empty());
    }

    #[test]
    fn a_flat_series_gets_a_readable_axis() {
        // Float noise around 6.37095044: the axis spans ±5 %, and its ticks print apart.
        let r = pad_range(6.370_950_44..6.370_950_46, true);
        assert!(
            (r.start - 6.0524).abs() < 1e-3 && (r.end - 6.6895).abs() < 1e-3,
            "{r:?}"
        );
        let decimals = axis_decimals(&r).unwrap();
        assert!(
            decimals <= 2,
            "{decimals} decimals for a span of {}",
            r.end - r.start
        );
        let ticks: Vec<String> = (0..=8)
            .map(|i| r.start + (r.end - r.start) * f64::from(i) / 8.0)
            .map(|v| format!("{v:.decimals$}"))
            .collect();
        let distinct: std::collections::BTreeSet<&String> = ticks.iter().collect();
        assert_eq!(distinct.len(), ticks.len(), "{ticks:?}");
        // Exactly constant, and constant zero.
        assert!(pad_range(2.0..2.0, true).contains(&2.0));
        assert_eq!(pad_range(0.0..0.0, true), 0.0..1.0);
        let r = pad_range(-3.0..-3.0, false);
        assert!(
            (r.start + 3.15).abs() < 1e-12 && (r.end + 2.85).abs() < 1e-12,
            "{r:?}"
        );
        // A real change of 1 % keeps its own range.
        let r = pad_range(1.0..1.01, false);
        assert!(r.start > 0.99 && r.end < 1.02, "{r:?}");
        // Tiny values get scientific ticks.
        assert_eq!(axis_decimals(&(0.0..1e-6)), None);
    }

    #[test]
    fn every_run_has_its_own_colour() {
        let colors: std::collections::BTreeSet<(u8, u8, u8)> = (0..25)
            .map(|i| {
                let c = run_color(i);
                (c.0, c.1, c.2)
            })
            .collect();
        assert_eq!(colors.len(), 25);
    }

    #[test]
    fn downsampling_keeps_the_mean() {
        let pts: Vec<(f64, f64)> = (0..6000).map(|i| (i as f64, 2.0)).collect();
        let d = downsample(pts);
        assert!(d.len() <= MAX_POINTS);
        assert!(d.iter().all(|p| (p.1 - 2.0).abs() < 1e-12));
    }
}
