//! The dashboards in the layout Neuronpedia imports for SAE features: SAEDashboard's
//! `neuronpedia_runner` output. A folder `<model>_<set>_<hook>_<d_sae>/` holds `batch-N.json` (the
//! model, layer, set and a list of features, each with its top and interval-sampled activations, its
//! activation-frequency and logit histograms and its top positive and negative logits),
//! `run_settings.json` (the runner's settings) and `skipped_indexes.json` (the dead latents).
use crate::{Error, Result};
use eval::report::features::{Example, FeatureDashboards, Histogram, LatentDashboard};
use runtime::fs::write_atomic;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// Features per batch file, the runner's default.
pub const FEATURES_PER_BATCH: usize = 128;

/// What the import reads beside the features, from the SAE's cfg.json (SAELens' keys).
#[derive(Clone, Debug, PartialEq)]
pub struct Source {
    pub model_id: String,
    pub layer: usize,
    pub hook_name: String,
    /// The Neuronpedia SAE set ("res-jb" in Neuronpedia's own): `sparsetrain-<hook>`.
    pub sae_set: String,
    /// The SAE's id in its release (its folder).
    pub sae_path: String,
    pub dataset: String,
    pub d_sae: usize,
}

impl Source {
    /// From an SAE folder's cfg.json; `sae_path` is the folder's name.
    pub fn from_sae_dir(dir: &Path) -> Result<Source> {
        let path = dir.join("cfg.json");
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        let cfg: Value = serde_json::from_str(&text).map_err(|e| Error::Checkpoint {
            path: path.clone(),
            msg: e.to_string(),
        })?;
        let text_at = |key: &str| cfg.pointer(key).and_then(Value::as_str).map(str::to_string);
        let hook_name = text_at("/metadata/hook_name").unwrap_or_else(|| "unknown".into());
        let hook = hook_name.rsplit_once(".hook_").map_or("sae", |(_, h)| h);
        Ok(Source {
            model_id: text_at("/metadata/model_name").unwrap_or_else(|| "unknown".into()),
            layer: cfg
                .pointer("/hook_layer")
                .and_then(Value::as_u64)
                .unwrap_or(0) as usize,
            sae_set: format!("sparsetrain-{hook}"),
            sae_path: dir
                .file_name()
                .map_or_else(|| "sae".into(), |n| n.to_string_lossy().into_owned()),
            dataset: text_at("/metadata/dataset_path").unwrap_or_default(),
            d_sae: cfg.pointer("/d_sae").and_then(Value::as_u64).unwrap_or(0) as usize,
            hook_name,
        })
    }

    /// The runner's output folder name.
    pub fn folder(&self) -> String {
        format!(
            "{}_{}_{}_{}",
            self.model_id, self.sae_set, self.hook_name, self.d_sae
        )
    }
}

/// Writes the dashboards under `out_dir/<Source::folder>/`; returns that folder.
pub fn export(f: &FeatureDashboards, source: &Source, out_dir: &Path) -> Result<PathBuf> {
    let dir = out_dir.join(source.folder());
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    let write = |name: &str, value: &Value| -> Result<()> {
        write_atomic(&dir.join(name), value.to_string().as_bytes())?;
        Ok(())
    };
    for (i, batch) in batches(f, source).iter().enumerate() {
        write(&format!("batch-{i}.json"), batch)?;
    }
    write(
        "run_settings.json",
        &run_settings(f, source, &out_dir.display().to_string()),
    )?;
    write(
        "skipped_indexes.json",
        &json!({
            "model_id": source.model_id,
            "layer": source.layer.to_string(),
            "sae_set": source.sae_set,
            "log_sparsity": 1,
            "skipped_indexes": f.dead_latents,
        }),
    )?;
    Ok(dir)
}

/// The batch files' contents: the latents in groups of [`FEATURES_PER_BATCH`].
pub fn batches(f: &FeatureDashboards, source: &Source) -> Vec<Value> {
    f.latents
        .chunks(FEATURES_PER_BATCH)
        .map(|chunk| {
            json!({
                "model_id": source.model_id,
                "layer": source.layer,
                "sae_set": source.sae_set,
                "features": chunk.iter().map(|l| feature(f, source, l)).collect::<Vec<_>>(),
            })
        })
        .collect()
}

/// One latent as SAEDashboard's `NeuronpediaDashboardFeature`. Neuron alignment, correlations and
/// decoder weights by head are not computed: their lists stay empty, as the runner leaves them when
/// those tables are off.
fn feature(f: &FeatureDashboards, source: &Source, l: &LatentDashboard) -> Value {
    let (freq_values, freq_heights) = bars(l.activation_histogram.as_ref());
    let (logit_values, logit_heights) = bars(l.logit_histogram.as_ref());
    let max = l
        .examples
        .iter()
        .map(Example::max_activation)
        .fold(0.0_f32, f32::max);
    // Top activations: bin_min -1 and bin_contains -1 mark the group, bin_max is the maximum.
    let mut activations: Vec<Value> = l
        .examples
        .iter()
        .map(|e| activation(-1.0, round(max as f64), -1.0, e))
        .collect();
    let total: u64 = l.quantiles.iter().map(|q| q.count).sum();
    for q in l.quantiles.iter().rev() {
        let contains = q.count as f64 / total.max(1) as f64;
        for e in &q.examples {
            activations.push(activation(
                round(q.lower as f64),
                round(q.upper as f64),
                contains,
                e,
            ));
        }
    }
    let empty: [u8; 0] = [];
    json!({
        "feature_index": l.index,
        "neuron_alignment_indices": empty,
        "neuron_alignment_values": empty,
        "neuron_alignment_l1": empty,
        "correlated_neurons_indices": empty,
        "correlated_neurons_l1": empty,
        "correlated_neurons_pearson": empty,
        "correlated_features_indices": empty,
        "correlated_features_l1": empty,
        "correlated_features_pearson": empty,
        "neg_str": l.suppressed.iter().map(|t| t.token.as_str()).collect::<Vec<_>>(),
        "neg_values": l.suppressed.iter().map(|t| round(t.value as f64)).collect::<Vec<_>>(),
        "pos_str": l.promoted.iter().map(|t| t.token.as_str()).collect::<Vec<_>>(),
        "pos_values": l.promoted.iter().map(|t| round(t.value as f64)).collect::<Vec<_>>(),
        "frac_nonzero": l.density,
        "freq_hist_data_bar_values": freq_values,
        "freq_hist_data_bar_heights": freq_heights,
        "logits_hist_data_bar_heights": logit_heights,
        "logits_hist_data_bar_values": logit_values,
        "n_prompts_total": f.n_contexts,
        "n_tokens_in_prompt": f.context_len,
        "dataset": source.dataset,
        "decoder_weights_dist": empty,
        "activations": activations,
    })
}

fn activation(bin_min: f64, bin_max: f64, bin_contains: f64, e: &Example) -> Value {
    json!({
        "bin_min": bin_min,
        "bin_max": bin_max,
        "bin_contains": bin_contains,
        "tokens": e.tokens,
        "values": e.activations.iter().map(|&v| round(v as f64)).collect::<Vec<_>>(),
    })
}

/// A histogram as the runner's bars: bin centres and counts.
fn bars(h: Option<&Histogram>) -> (Vec<f64>, Vec<f64>) {
    let Some(h) = h else {
        return (Vec::new(), Vec::new());
    };
    let centres = h
        .edges
        .windows(2)
        .map(|w| round((w[0] as f64 + w[1] as f64) / 2.0))
        .collect();
    (centres, h.counts.iter().map(|&c| c as f64).collect())
}

/// Three decimals, as the runner rounds.
fn round(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// The runner's settings (`NeuronpediaRunnerConfig`) as far as they describe these dashboards.
fn run_settings(f: &FeatureDashboards, source: &Source, outputs_dir: &str) -> Value {
    let top = f
        .latents
        .iter()
        .map(|l| l.examples.len())
        .max()
        .unwrap_or(0);
    let per_quantile = f
        .latents
        .iter()
        .flat_map(|l| l.quantiles.iter().map(|q| q.examples.len()))
        .max()
        .unwrap_or(0);
    let quantiles = f
        .latents
        .iter()
        .map(|l| l.quantiles.len())
        .max()
        .unwrap_or(0);
    json!({
        "sae_set": source.sae_set,
        "sae_path": source.sae_path,
        "outputs_dir": outputs_dir,
        "np_sae_id_suffix": null,
        "np_set_name": source.sae_set,
        "from_local_sae": true,
        "sparsity_threshold": 1,
        "huggingface_dataset_path": source.dataset,
        "n_prompts_total": f.n_contexts,
        "n_tokens_in_prompt": f.context_len,
        "n_features_at_a_time": FEATURES_PER_BATCH,
        "n_quantiles": quantiles,
        "top_acts_group_size": top,
        "quantile_group_size": per_quantile,
        "use_dfa": false,
        "model_dtype": "float32",
        "sae_dtype": "float32",
        "model_id": source.model_id,
        "layer": source.layer,
        "shuffle_tokens": false,
    })
}
