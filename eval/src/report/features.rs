//! Feature dashboards: the schema of `RUN/features.json` (docs/features.md) and its section of the
//! report, with tokens shaded by activation as SAEDashboard and Neuronpedia show them.

use super::html::escape;
use super::plots::{density_histogram, short_number};
use harness::atomic::write_atomic;
use harness::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::{fmt::Write, path::Path};

/// File name of the dashboards in a run directory.
pub const FEATURES_FILE: &str = "features.json";

/// `features.json`: the log-density histogram of all latents, and the dashboards of a sample of latents
/// across the density range and of any latent asked for by index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeatureDashboards {
    /// "batchtopk", "matryoshka" or "crosscoder".
    #[serde(default)]
    pub arch: String,
    /// The SAE's hook points, in the order of `decoder_norm_by_layer`.
    #[serde(default)]
    pub hooks: Vec<String>,
    pub n_latents: usize,
    /// Held-out tokens encoded (BOS and `<|endoftext|>` positions excluded): the densities' denominator.
    pub n_tokens: u64,
    pub n_contexts: u64,
    /// Tokens per held-out context.
    #[serde(default)]
    pub context_len: usize,
    pub histogram: DensityHistogram,
    /// The latents that never fired on the held-out tokens.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dead_latents: Vec<usize>,
    pub latents: Vec<LatentDashboard>,
    /// Why the latents have no promoted and suppressed tokens, when they have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_missing: Option<String>,
}

/// Latents by log10 density: `counts[i]` latents lie in [edges[i], edges[i+1]) (the last bin includes 1);
/// `dead` latents never fired. `counts` and `dead` add up to `n_latents`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DensityHistogram {
    pub log10_edges: Vec<f64>,
    pub counts: Vec<u64>,
    pub dead: u64,
}

/// One latent's dashboard: sampled across the density range, or asked for by index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatentDashboard {
    pub index: usize,
    /// Fraction of the held-out tokens on which it is active.
    pub density: f64,
    /// Its place among all latents by density, 0 = the densest (dead latents come last).
    #[serde(default)]
    pub density_rank: usize,
    /// Asked for by index (`features --latents`) rather than drawn by the density sample.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub requested: bool,
    /// Matryoshka: the nested group it belongs to (0 = the smallest prefix).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<usize>,
    /// Crosscoder: the L2 norm of its decoder row at each hook point (in `hooks` order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decoder_norm_by_layer: Vec<f64>,
    /// Top-activating contexts, by their maximum activation, descending.
    pub examples: Vec<Example>,
    /// Its non-zero activations over the held-out tokens (absent for a dead latent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activation_histogram: Option<Histogram>,
    /// Contexts drawn at random from equal-width intervals of its activation range, lowest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quantiles: Vec<QuantileGroup>,
    /// The output tokens its decoder direction promotes most (`W_dec[latent] · W_U`, largest first) and
    /// suppresses most (most negative first); empty when the run has no unembedding
    /// ([`FeatureDashboards::output_tokens_missing`] says why).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub promoted: Vec<TokenEffect>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suppressed: Vec<TokenEffect>,
    /// The distribution of `W_dec[latent] · W_U` over the whole vocabulary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logit_histogram: Option<Histogram>,
}

/// Equal-width bins: `counts[i]` values lie in [edges[i], edges[i+1]) (the last bin includes its end).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Histogram {
    pub edges: Vec<f32>,
    pub counts: Vec<u64>,
}

impl Histogram {
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// One interval of a latent's activation range and the contexts sampled from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuantileGroup {
    /// The interval [lower, upper) of activations (the top interval includes its upper end).
    pub lower: f32,
    pub upper: f32,
    /// Held-out tokens whose activation lies in the interval.
    pub count: u64,
    /// Uniformly sampled such tokens, each shown in its window (`focus` marks the sampled token).
    pub examples: Vec<Example>,
}

/// An output token and the latent's direct effect on its logit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenEffect {
    pub token: String,
    pub token_id: u32,
    pub value: f32,
}

/// A window of one held-out context around a token of interest: the latent's strongest activation
/// in the context for the top examples, the sampled token for the quantile groups.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Example {
    /// Decoded GPT-2 tokens (each decoded alone; a token that splits a UTF-8 character shows U+FFFD).
    pub tokens: Vec<String>,
    /// The latent's activation at each token (0 where inactive or not encoded).
    pub activations: Vec<f32>,
    #[serde(default)]
    pub token_ids: Vec<u32>,
    /// Which held-out context, and the position of `tokens[0]` in it.
    #[serde(default)]
    pub context: usize,
    #[serde(default)]
    pub start: usize,
    /// The token of interest's index in the window.
    #[serde(default)]
    pub focus: usize,
}

impl Example {
    /// The largest activation of the window.
    pub fn max_activation(&self) -> f32 {
        self.activations.iter().copied().fold(0.0, f32::max)
    }
}

impl FeatureDashboards {
    /// Reads `dir/features.json`; `None` when the run has none.
    pub fn load(dir: &Path) -> Result<Option<FeatureDashboards>> {
        let path = dir.join(FEATURES_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io("reading", &path)(e)),
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| Error::Report(format!("{}: {e}", path.display())))
    }

    /// Writes `dir/features.json` atomically.
    pub fn write(&self, dir: &Path) -> Result<std::path::PathBuf> {
        let path = dir.join(FEATURES_FILE);
        let text = serde_json::to_string(self).map_err(|source| Error::Json {
            what: FEATURES_FILE.into(),
            source,
        })?;
        write_atomic(&path, text.as_bytes())?;
        Ok(path)
    }

    pub fn dead_fraction(&self) -> f64 {
        self.histogram.dead as f64 / self.n_latents.max(1) as f64
    }
}

/// The log-density histogram of all latents, when any is alive.
pub fn histogram_svg(f: &FeatureDashboards) -> Result<Option<String>> {
    if f.histogram.counts.is_empty() {
        return Ok(None);
    }
    density_histogram(
        "Feature density (all latents)",
        &f.histogram.log10_edges,
        &f.histogram.counts,
    )
    .map(Some)
}

/// The dashboards' styles, added to the report's.
pub const STYLE: &str = "
.latents { display: grid; grid-template-columns: repeat(auto-fill, minmax(640px, 1fr)); gap: 10px; }
.latent { background: white; border: 1px solid #ddd; padding: 6px 9px; font-size: 12px; }
.lhead { margin-bottom: 4px; color: #333; }
.ex { font-family: ui-monospace, Menlo, Consolas, monospace; white-space: pre; overflow: hidden;
      text-overflow: ellipsis; line-height: 1.55; border-top: 1px solid #f2f2f2; }
.ex span { border-radius: 2px; }
.ex span.pk { outline: 1px solid #b34400; }
details summary { color: #777; cursor: pointer; font-size: 11px; }
.norms { color: #555; margin-bottom: 3px; }
.nbar { display: inline-block; margin-right: 8px; }
.nbar i { display: inline-block; height: 8px; background: #9467bd; margin-right: 3px; vertical-align: middle; }
.lstats { display: flex; gap: 18px; align-items: flex-start; margin: 3px 0 5px 0; }
.hist { display: flex; align-items: flex-end; height: 36px; gap: 1px; border-bottom: 1px solid #bbb; }
.hist i { display: block; width: 5px; background: #ff7f0e; }
.hist.logit i { background: #7f7f7f; }
.haxis { display: flex; justify-content: space-between; color: #888; font-size: 10px; }
table.tok { margin: 0; font-size: 11px; }
table.tok td { padding: 1px 5px; font-family: ui-monospace, Menlo, Consolas, monospace; }
td.pos { color: #1a7f37; } td.neg { color: #b31d28; }
.qhead { color: #555; margin-top: 3px; }
.lookup { margin: 4px 0 10px 0; font-size: 13px; }
.lookup input { width: 110px; }
";

/// Examples shown open per latent; the rest sit in a collapsed list.
const OPEN_EXAMPLES: usize = 3;
/// Promoted and suppressed tokens shown per latent.
const SHOWN_TOKENS: usize = 8;

/// A box that shows only the dashboard of the latent whose index is typed (all of them when empty),
/// offering the indexes present.
pub fn lookup_box(out: &mut String, all: &[&FeatureDashboards]) {
    let mut present: Vec<usize> = all
        .iter()
        .flat_map(|f| f.latents.iter().map(|l| l.index))
        .collect();
    present.sort_unstable();
    present.dedup();
    out.push_str(
        "<div class=\"lookup\">Latent by index: <input id=\"latent-lookup\" type=\"number\" min=\"0\" \
         list=\"latent-ids\" placeholder=\"all\"> <span id=\"lookup-note\" class=\"note\"></span>\
         <datalist id=\"latent-ids\">",
    );
    for i in &present {
        let _ = write!(out, "<option value=\"{i}\">");
    }
    out.push_str("</datalist></div>\n");
    out.push_str(
        "<script>(function () {\n\
         var box = document.getElementById('latent-lookup'), note = document.getElementById('lookup-note');\n\
         box.addEventListener('input', function () {\n\
         var v = box.value.trim(), shown = 0;\n\
         document.querySelectorAll('.latent[data-latent]').forEach(function (card) {\n\
         var on = v === '' || card.getAttribute('data-latent') === v;\n\
         card.style.display = on ? '' : 'none'; if (on) shown++; });\n\
         note.textContent = v === '' || shown ? '' : 'latent ' + v + \
         ' has no dashboard here: build it with features RUN_DIR --latents ' + v;\n\
         });\n})();</script>\n",
    );
}

/// The dashboards section of the report, for the run labelled `label`.
pub fn section(out: &mut String, label: &str, f: &FeatureDashboards) -> Result<()> {
    let alive = f.n_latents as u64 - f.histogram.dead;
    let requested = f.latents.iter().filter(|l| l.requested).count();
    let _ = writeln!(
        out,
        "<p class=\"note\">{}: {} latents ({} alive, {:.2} % dead) over {} held-out tokens in {} contexts; \
         {} latents sampled across the density range, densest first{}. Shading: activation over the \
         latent's largest shown activation; hover a token for its value. Histograms: the latent's non-zero \
         activations (orange) and its direct effect on every output logit (grey).</p>",
        escape(label),
        f.n_latents,
        alive,
        100.0 * f.dead_fraction(),
        f.n_tokens,
        f.n_contexts,
        f.latents.len() - requested,
        if requested > 0 {
            format!(", then {requested} asked for by index")
        } else {
            String::new()
        }
    );
    if let Some(why) = &f.output_tokens_missing {
        let _ = writeln!(
            out,
            "<p class=\"note\">No promoted or suppressed tokens: {}.</p>",
            escape(why)
        );
    }
    out.push_str("<div class=\"latents\">\n");
    for latent in &f.latents {
        latent_card(out, latent, &f.hooks);
    }
    out.push_str("</div>\n");
    Ok(())
}

fn latent_card(out: &mut String, latent: &LatentDashboard, hooks: &[String]) {
    let top = latent
        .examples
        .iter()
        .map(Example::max_activation)
        .fold(0.0_f32, f32::max);
    let _ = write!(
        out,
        "<div class=\"latent\" data-latent=\"{0}\"><div class=\"lhead\"><b>latent {0}</b> · density {1} · \
         rank {2} · max act {3}",
        latent.index,
        density_text(latent.density),
        latent.density_rank,
        short_number(top as f64)
    );
    if let Some(g) = latent.group {
        let _ = write!(out, " · group {g}");
    }
    if latent.requested {
        out.push_str(" · asked for");
    }
    out.push_str("</div>");
    if !latent.decoder_norm_by_layer.is_empty() {
        layer_norms(out, &latent.decoder_norm_by_layer, hooks);
    }
    out.push_str("<div class=\"lstats\">");
    if let Some(h) = &latent.activation_histogram {
        bars(out, h, "", "activation");
    }
    if let Some(h) = &latent.logit_histogram {
        bars(out, h, " logit", "logit effect");
    }
    if !latent.promoted.is_empty() || !latent.suppressed.is_empty() {
        token_table(out, &latent.promoted, &latent.suppressed);
    }
    out.push_str("</div>");
    for (i, ex) in latent.examples.iter().enumerate() {
        if i == OPEN_EXAMPLES {
            let _ = write!(
                out,
                "<details><summary>{} more top examples</summary>",
                latent.examples.len() - OPEN_EXAMPLES
            );
        }
        example_line(out, ex, top);
    }
    if latent.examples.len() > OPEN_EXAMPLES {
        out.push_str("</details>");
    }
    if latent.examples.is_empty() {
        out.push_str("<div class=\"note\">no held-out example</div>");
    }
    if latent.quantiles.iter().any(|q| !q.examples.is_empty()) {
        let total: u64 = latent.quantiles.iter().map(|q| q.count).sum();
        out.push_str("<details><summary>contexts sampled by activation interval</summary>");
        for q in latent.quantiles.iter().rev() {
            let _ = write!(
                out,
                "<div class=\"qhead\">[{}, {}): {} tokens ({:.1} %)</div>",
                short_number(q.lower as f64),
                short_number(q.upper as f64),
                q.count,
                100.0 * q.count as f64 / total.max(1) as f64
            );
            for ex in &q.examples {
                example_line(out, ex, top);
            }
        }
        out.push_str("</details>");
    }
    out.push_str("</div>\n");
}

/// A histogram as small bars, its range written under it.
fn bars(out: &mut String, h: &Histogram, class: &str, what: &str) {
    let (Some(lo), Some(hi)) = (h.edges.first(), h.edges.last()) else {
        return;
    };
    let top = h.counts.iter().copied().max().unwrap_or(0).max(1) as f64;
    let _ = write!(out, "<div><div class=\"hist{class}\">");
    for (i, &c) in h.counts.iter().enumerate() {
        let _ = write!(
            out,
            "<i style=\"height:{:.0}px\" title=\"{what} [{}, {}): {c}\"></i>",
            (36.0 * c as f64 / top).max(if c > 0 { 1.0 } else { 0.0 }),
            short_number(h.edges[i] as f64),
            short_number(h.edges[i + 1] as f64),
        );
    }
    let _ = write!(
        out,
        "</div><div class=\"haxis\"><span>{}</span><span>{what}</span><span>{}</span></div></div>",
        short_number(*lo as f64),
        short_number(*hi as f64)
    );
}

/// Promoted tokens beside suppressed ones, strongest first.
fn token_table(out: &mut String, promoted: &[TokenEffect], suppressed: &[TokenEffect]) {
    out.push_str("<table class=\"tok\"><tr><th class=\"l\">promoted</th><th></th><th class=\"l\">suppressed</th><th></th></tr>");
    let rows = promoted.len().max(suppressed.len()).min(SHOWN_TOKENS);
    let cell = |out: &mut String, t: Option<&TokenEffect>, class: &str| match t {
        Some(t) => {
            let _ = write!(
                out,
                "<td class=\"l\" title=\"token {}\">{}</td><td class=\"{class}\">{}</td>",
                t.token_id,
                escape(&visible(&t.token)),
                short_number(t.value as f64)
            );
        }
        None => out.push_str("<td></td><td></td>"),
    };
    for i in 0..rows {
        out.push_str("<tr>");
        cell(out, promoted.get(i), "pos");
        cell(out, suppressed.get(i), "neg");
        out.push_str("</tr>");
    }
    out.push_str("</table>");
}

/// Per-layer decoder norms as small bars, relative to the largest.
fn layer_norms(out: &mut String, norms: &[f64], hooks: &[String]) {
    let top = norms.iter().copied().fold(0.0_f64, f64::max).max(1e-30);
    out.push_str("<div class=\"norms\">decoder norm by layer:");
    for (l, v) in norms.iter().enumerate() {
        let name = hooks
            .get(l)
            .cloned()
            .unwrap_or_else(|| format!("layer {l}"));
        let _ = write!(
            out,
            " <span class=\"nbar\" title=\"{} {}\"><i style=\"width:{:.0}px\"></i>{}</span>",
            escape(&name),
            short_number(*v),
            40.0 * v / top,
            escape(&name)
        );
    }
    out.push_str("</div>");
}

/// A window's tokens shaded by activation over `top`; the token of interest outlined.
fn example_line(out: &mut String, ex: &Example, top: f32) {
    out.push_str("<div class=\"ex\">");
    for (i, (tok, &a)) in ex.tokens.iter().zip(&ex.activations).enumerate() {
        let text = escape(&visible(tok));
        if a > 0.0 {
            let alpha = (a / top.max(1e-30)).clamp(0.08, 1.0);
            let class = if i == ex.focus { " class=\"pk\"" } else { "" };
            let _ = write!(
                out,
                "<span{class} style=\"background:rgba(255,96,0,{alpha:.2})\" title=\"{}\">{text}</span>",
                short_number(a as f64)
            );
        } else {
            out.push_str(&text);
        }
    }
    out.push_str("</div>");
}

/// Newlines and tabs drawn as symbols, so a context stays on its line.
fn visible(token: &str) -> String {
    token.replace('\n', "↵").replace('\t', "⇥")
}

fn density_text(d: f64) -> String {
    if d >= 0.01 {
        format!("{:.2} %", 100.0 * d)
    } else {
        format!("{d:.2e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_shaded_escaped_and_kept_on_one_line() {
        let ex = Example {
            tokens: vec![" a".into(), "<b>".into(), "\n".into()],
            activations: vec![0.0, 2.0, 1.0],
            token_ids: vec![],
            context: 0,
            start: 0,
            focus: 1,
        };
        let mut out = String::new();
        example_line(&mut out, &ex, 2.0);
        assert!(out.contains("&lt;b&gt;"));
        assert!(out.contains("class=\"pk\" style=\"background:rgba(255,96,0,1.00)\""));
        assert!(out.contains("rgba(255,96,0,0.50)\" title=\"1\">↵"));
        assert!(out.starts_with("<div class=\"ex\"> a<span"));
    }

    fn example(tokens: &[&str], activations: &[f32], focus: usize) -> Example {
        Example {
            tokens: tokens.iter().map(|t| t.to_string()).collect(),
            activations: activations.to_vec(),
            token_ids: vec![],
            context: 0,
            start: 0,
            focus,
        }
    }

    fn dashboards(missing: Option<&str>) -> FeatureDashboards {
        let effect = |t: &str, v: f32| TokenEffect {
            token: t.into(),
            token_id: 7,
            value: v,
        };
        FeatureDashboards {
            arch: "batchtopk".into(),
            hooks: vec![],
            n_latents: 8,
            n_tokens: 100,
            n_contexts: 4,
            context_len: 25,
            histogram: DensityHistogram {
                log10_edges: vec![-1.0, 0.0],
                counts: vec![7],
                dead: 1,
            },
            dead_latents: vec![3],
            latents: vec![LatentDashboard {
                index: 5,
                density: 0.05,
                density_rank: 2,
                requested: true,
                group: None,
                decoder_norm_by_layer: vec![],
                examples: vec![example(&[" a", " b"], &[0.0, 2.0], 1)],
                activation_histogram: Some(Histogram {
                    edges: vec![0.0, 1.0, 2.0],
                    counts: vec![3, 2],
                }),
                quantiles: vec![QuantileGroup {
                    lower: 1.0,
                    upper: 2.0,
                    count: 2,
                    examples: vec![example(&[" q"], &[1.5], 0)],
                }],
                promoted: vec![effect(" <up>", 0.5)],
                suppressed: vec![effect(" down", -0.25)],
                logit_histogram: None,
            }],
            output_tokens_missing: missing.map(str::to_string),
        }
    }

    #[test]
    fn a_card_shows_histogram_tokens_and_interval_samples() {
        let f = dashboards(None);
        let mut out = String::new();
        section(&mut out, "run", &f).unwrap();
        assert!(out.contains("<div class=\"latent\" data-latent=\"5\">"));
        assert!(out.contains(
            "0 latents sampled across the density range, densest first, then 1 asked for by index"
        ));
        assert!(out.contains("title=\"activation [1, 2): 2\""), "{out}");
        assert!(
            out.contains("&lt;up&gt;</td><td class=\"pos\">0.5</td>"),
            "{out}"
        );
        assert!(out.contains("<td class=\"neg\">-0.25</td>"));
        assert!(out.contains("[1, 2): 2 tokens (100.0 %)"));
        assert!(!out.contains("No promoted"));
        let mut out = String::new();
        section(&mut out, "run", &dashboards(Some("no model"))).unwrap();
        assert!(out.contains("No promoted or suppressed tokens: no model."));
    }

    #[test]
    fn the_lookup_box_offers_the_latents_present() {
        let (a, mut b) = (dashboards(None), dashboards(None));
        b.latents[0].index = 2;
        let mut out = String::new();
        lookup_box(&mut out, &[&a, &b]);
        assert!(out.contains("<option value=\"2\"><option value=\"5\"></datalist>"));
        assert!(
            out.contains("id=\"latent-lookup\"")
                && out.contains("querySelectorAll('.latent[data-latent]')")
        );
    }

    #[test]
    fn older_features_json_still_loads() {
        let old = r#"{"n_latents": 2, "n_tokens": 10, "n_contexts": 1,
            "histogram": {"log10_edges": [], "counts": [], "dead": 2},
            "latents": [{"index": 0, "density": 0.0, "examples": [
                {"tokens": ["a"], "activations": [0.0]}]}]}"#;
        let f: FeatureDashboards = serde_json::from_str(old).unwrap();
        assert!(f.latents[0].quantiles.is_empty() && f.latents[0].promoted.is_empty());
        assert_eq!(f.latents[0].examples[0].focus, 0);
    }
}
