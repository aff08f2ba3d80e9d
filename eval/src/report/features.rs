//! Feature dashboards: the schema of `RUN/features.json` (docs/features.md) and its section of the
//! report, with tokens shaded by activation as SAEDashboard and Neuronpedia show them.

use super::html::escape;
use super::plots::{density_histogram, short_number};
use crate::atomic::write_atomic;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::fmt::Write;
use std::path::Path;

/// File name of the dashboards in a run directory.
pub const FEATURES_FILE: &str = "features.json";

/// `features.json`: a sample of latents across the density range with their top-activating held-out
/// contexts, and the log-density histogram of all latents.
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
    pub histogram: DensityHistogram,
    pub latents: Vec<LatentDashboard>,
}

/// Latents by log10 density: `counts[i]` latents lie in [edges[i], edges[i+1]) (the last bin includes 1);
/// `dead` latents never fired. `counts` and `dead` add up to `n_latents`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DensityHistogram {
    pub log10_edges: Vec<f64>,
    pub counts: Vec<u64>,
    pub dead: u64,
}

/// One sampled latent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatentDashboard {
    pub index: usize,
    /// Fraction of the held-out tokens on which it is active.
    pub density: f64,
    /// Its place among the alive latents by density, 0 = the densest.
    #[serde(default)]
    pub density_rank: usize,
    /// Matryoshka: the nested group it belongs to (0 = the smallest prefix).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<usize>,
    /// Crosscoder: the L2 norm of its decoder row at each hook point (in `hooks` order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decoder_norm_by_layer: Vec<f64>,
    /// Top-activating contexts, by their maximum activation, descending.
    pub examples: Vec<Example>,
}

/// A window of one held-out context around the latent's strongest activation in it.
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

/// Examples shown open per latent; the rest sit in a collapsed list.
const OPEN_EXAMPLES: usize = 3;

/// The dashboards section of the report, for the run labelled `label`.
pub fn section(out: &mut String, label: &str, f: &FeatureDashboards) -> Result<()> {
    let alive = f.n_latents as u64 - f.histogram.dead;
    let _ = writeln!(
        out,
        "<p class=\"note\">{}: {} latents ({} alive, {:.2} % dead) over {} held-out tokens in {} contexts; \
         {} latents sampled across the density range, densest first. Shading: activation over the \
         latent's largest shown activation; hover a token for its value.</p>",
        escape(label),
        f.n_latents,
        alive,
        100.0 * f.dead_fraction(),
        f.n_tokens,
        f.n_contexts,
        f.latents.len()
    );
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
        "<div class=\"latent\"><div class=\"lhead\"><b>latent {}</b> · density {} · rank {} · max act {}",
        latent.index,
        density_text(latent.density),
        latent.density_rank,
        short_number(top as f64)
    );
    if let Some(g) = latent.group {
        let _ = write!(out, " · group {g}");
    }
    out.push_str("</div>");
    if !latent.decoder_norm_by_layer.is_empty() {
        layer_norms(out, &latent.decoder_norm_by_layer, hooks);
    }
    for (i, ex) in latent.examples.iter().enumerate() {
        if i == OPEN_EXAMPLES {
            let _ = write!(
                out,
                "<details><summary>{} more</summary>",
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
    out.push_str("</div>\n");
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

fn example_line(out: &mut String, ex: &Example, top: f32) {
    let peak = ex.max_activation();
    out.push_str("<div class=\"ex\">");
    for (tok, &a) in ex.tokens.iter().zip(&ex.activations) {
        let text = escape(&visible(tok));
        if a > 0.0 {
            let alpha = (a / top.max(1e-30)).clamp(0.08, 1.0);
            let class = if a == peak { " class=\"pk\"" } else { "" };
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
        };
        let mut out = String::new();
        example_line(&mut out, &ex, 2.0);
        assert!(out.contains("&lt;b&gt;"));
        assert!(out.contains("class=\"pk\" style=\"background:rgba(255,96,0,1.00)\""));
        assert!(out.contains("rgba(255,96,0,0.50)\" title=\"1\">↵"));
        assert!(out.starts_with("<div class=\"ex\"> a<span"));
    }
}
