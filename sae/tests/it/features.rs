//! Feature dashboards on a planted SAE: inputs are one-hot codes of the tokens, so which latent fires
//! where, and how strongly, is known exactly.
use activations::tokenizer::END_OF_TEXT;
use activations::Gpt2Tokenizer;
use candle_core::{Device, Tensor};
use sae::checkpoint::Exported;
use sae::config::Arch;
use sae::features::{build, FeatureOptions, HeldoutContexts, InferenceSae, Unembedding};
use std::collections::BTreeSet;

const D: usize = 8;
const T: usize = 12;

/// Token id → e_(id mod D) · (1 + id div D): tokens 3, 11, 19 share a direction, at 1, 2 and 3.
fn embed(tokens: &Tensor) -> sae::Result<Tensor> {
    let ids: Vec<u32> = tokens.flatten_all()?.to_vec1()?;
    let mut x = vec![0f32; ids.len() * D];
    for (row, id) in ids.iter().enumerate() {
        x[row * D + (*id as usize % D)] = 1.0 + (*id as usize / D) as f32;
    }
    Ok(Tensor::from_vec(x, (ids.len(), D), &Device::Cpu)?)
}

/// Six contexts of T tokens, each BOS first, filler tokens 1 and 2 elsewhere.
fn contexts() -> Vec<u32> {
    let mut tokens = Vec::new();
    for c in 0..6 {
        let mut ctx = vec![END_OF_TEXT];
        ctx.extend((1..T).map(|p| 1 + (p + c) as u32 % 2));
        match c {
            1 => ctx[5] = 11,
            2 => ctx[2] = 3,
            4 => ctx[7] = 19,
            5 => ctx[9] = 3,
            _ => {}
        }
        if c == 3 {
            ctx[4] = 8; // e_0 at 2: the BOS direction, at a real position
        }
        tokens.extend(ctx);
    }
    tokens
}

/// Latent l reads direction `reads[l]` (None: a latent that never fires); `layers` > 1 splits d_in.
fn planted(arch: Arch, reads: &[Option<usize>], layers: usize, groups: Vec<usize>) -> InferenceSae {
    let n = reads.len();
    let mut w_enc = vec![0f32; D * n];
    for (l, r) in reads.iter().enumerate() {
        if let Some(dir) = r {
            w_enc[dir * n + l] = 1.0;
        }
    }
    // Decoder row l: norm l+1 in the first layer's half, 1 in the second's.
    let mut w_dec = vec![0f32; n * D];
    for l in 0..n {
        w_dec[l * D] = (l + 1) as f32;
        if layers > 1 {
            w_dec[l * D + D / layers] = 1.0;
        }
    }
    let dev = Device::Cpu;
    InferenceSae {
        arch,
        n,
        layers,
        d_model: D / layers,
        groups,
        weights: Exported {
            w_enc: Tensor::from_vec(w_enc, (D, n), &dev).unwrap(),
            b_enc: Tensor::zeros(n, candle_core::DType::F32, &dev).unwrap(),
            w_dec: Tensor::from_vec(w_dec, (n, D), &dev).unwrap(),
            b_dec: Tensor::zeros(D, candle_core::DType::F32, &dev).unwrap(),
            threshold: Tensor::full(0.5f32, n, &dev).unwrap(),
        },
    }
}

fn run(sae: &InferenceSae, opts: &FeatureOptions) -> eval::report::features::FeatureDashboards {
    run_with(
        sae,
        opts,
        &Unembedding::Missing("no model in this test".into()),
    )
    .unwrap()
}

fn run_with(
    sae: &InferenceSae,
    opts: &FeatureOptions,
    unembedding: &Unembedding,
) -> sae::Result<eval::report::features::FeatureDashboards> {
    let tokens = contexts();
    let data = HeldoutContexts {
        activations: &embed,
        tokens: &tokens,
        context_len: T,
        model: None,
    };
    let tok = Gpt2Tokenizer::new().unwrap();
    build(
        sae,
        &data,
        &tok,
        &["blocks.0.hook_resid_post".into()],
        unembedding,
        opts,
    )
}

#[test]
fn a_planted_latent_ranks_its_tokens_contexts_first() {
    // Latent 0 reads tokens 3/11/19, latent 1 the BOS direction (token 8 once), latent 2 is dead,
    // latent 3 reads the filler token 1.
    let sae = planted(
        Arch::Batchtopk,
        &[Some(3), Some(0), None, Some(1)],
        1,
        vec![],
    );
    let opts = FeatureOptions {
        latents: 64,
        examples: 3,
        before: 3,
        after: 1,
        ..FeatureOptions::default()
    };
    let f = run(&sae, &opts);
    let encoded = 6 * (T - 1);
    assert_eq!(f.n_tokens, encoded as u64, "BOS positions are not encoded");
    assert_eq!(f.n_contexts, 6);
    assert_eq!(f.histogram.dead, 1);
    assert_eq!(
        f.histogram.counts.iter().sum::<u64>() + f.histogram.dead,
        sae.n as u64,
        "the histogram holds every latent"
    );
    let by_index = |i: usize| f.latents.iter().find(|l| l.index == i).unwrap();
    assert!(
        f.latents.iter().all(|l| l.index != 2),
        "a dead latent is not sampled"
    );
    // Densest first: the filler, then the planted latent, then the BOS-direction latent.
    let order: Vec<usize> = f.latents.iter().map(|l| l.index).collect();
    assert_eq!(order, vec![3, 0, 1]);

    let planted = by_index(0);
    assert_eq!(planted.density, 4.0 / encoded as f64);
    assert_eq!(planted.density_rank, 1);
    let contexts: Vec<usize> = planted.examples.iter().map(|e| e.context).collect();
    assert_eq!(
        contexts,
        vec![4, 1, 2],
        "by maximum activation, ties to the earlier context"
    );
    let top = &planted.examples[0];
    assert_eq!(top.start, 7 - 3);
    assert_eq!(top.token_ids, contexts_tokens(4, 4, 9));
    assert_eq!(top.activations, vec![0.0, 0.0, 0.0, 3.0, 0.0]);
    assert_eq!(top.tokens[3], "4", "token 19 decodes as GPT-2's \"4\"");
    assert_eq!(
        planted.examples[1]
            .activations
            .iter()
            .cloned()
            .fold(0.0, f32::max),
        2.0
    );
    for l in &f.latents {
        for ex in &l.examples {
            assert_eq!(ex.tokens.len(), ex.activations.len());
            assert_eq!(ex.tokens.len(), ex.token_ids.len());
        }
        let maxes: Vec<f32> = l.examples.iter().map(|e| e.max_activation()).collect();
        assert!(maxes.windows(2).all(|w| w[0] >= w[1]), "{maxes:?}");
    }
    // The BOS direction fires only on token 8: BOS itself is never an example.
    let bos = by_index(1);
    assert_eq!(bos.examples.len(), 1);
    assert_eq!(bos.examples[0].context, 3);
    assert!(bos.group.is_none() && bos.decoder_norm_by_layer.is_empty());

    let json: serde_json::Value = serde_json::to_value(&f).unwrap();
    let ex = &json["latents"][0]["examples"][0];
    assert!(json["latents"][0]["index"].is_u64() && json["latents"][0]["density"].is_f64());
    assert!(ex["tokens"][0].is_string() && ex["activations"][0].is_number());
}

fn contexts_tokens(c: usize, from: usize, to: usize) -> Vec<u32> {
    contexts()[c * T + from..c * T + to].to_vec()
}

#[test]
fn matryoshka_groups_and_crosscoder_layers_are_reported() {
    let sae = planted(
        Arch::Matryoshka,
        &[Some(3), Some(1), Some(2)],
        1,
        vec![1, 2],
    );
    let f = run(&sae, &FeatureOptions::default());
    let group = |i: usize| f.latents.iter().find(|l| l.index == i).unwrap().group;
    assert_eq!((group(0), group(1), group(2)), (Some(0), Some(1), Some(1)));
    assert_eq!(f.arch, "matryoshka");

    let sae = planted(Arch::Crosscoder, &[Some(3), Some(1)], 2, vec![]);
    let f = run(&sae, &FeatureOptions::default());
    let norms = |i: usize| {
        f.latents
            .iter()
            .find(|l| l.index == i)
            .unwrap()
            .decoder_norm_by_layer
            .clone()
    };
    assert_eq!(norms(0), vec![1.0, 1.0]);
    assert_eq!(norms(1), vec![2.0, 1.0]);
}

#[test]
fn sampling_is_bounded_by_the_options() {
    let sae = planted(
        Arch::Batchtopk,
        &[Some(3), Some(1), Some(2), Some(0)],
        1,
        vec![],
    );
    let opts = FeatureOptions {
        latents: 2,
        examples: 1,
        max_tokens: 2 * T,
        ..FeatureOptions::default()
    };
    let f = run(&sae, &opts);
    assert_eq!(f.n_contexts, 2, "max_tokens bounds the contexts encoded");
    assert_eq!(f.latents.len(), 2, "the densest and the rarest alive");
    assert!(f.latents.iter().all(|l| l.examples.len() <= 1));
}

/// A token embedding [vocab, d] with distinct, irregular entries.
fn embedding(vocab: usize, d: usize) -> Vec<f32> {
    (0..vocab * d)
        .map(|i| ((i * 7919 % 1013) as f32 / 1013.0 - 0.5) * if i % 3 == 0 { 2.0 } else { 1.0 })
        .collect()
}

/// The `keep` largest (or, `largest` false, smallest) entries of W_dec[latent, last layer] · wteᵀ in f64,
/// ties to the lower token id.
fn reference_effects(
    sae: &InferenceSae,
    wte: &[f32],
    vocab: usize,
    latent: usize,
    keep: usize,
    largest: bool,
) -> Vec<(u32, f64)> {
    let d = sae.d_model;
    let w_dec: Vec<Vec<f32>> = sae.weights.w_dec.to_vec2().unwrap();
    let row = &w_dec[latent][d * (sae.layers - 1)..];
    let mut effects: Vec<(u32, f64)> = (0..vocab)
        .map(|v| {
            let dot = (0..d)
                .map(|k| row[k] as f64 * wte[v * d + k] as f64)
                .sum::<f64>();
            (v as u32, dot)
        })
        .collect();
    effects.sort_by(|a, b| {
        let o = a.1.total_cmp(&b.1);
        let o = if largest { o.reverse() } else { o };
        o.then(a.0.cmp(&b.0))
    });
    effects.truncate(keep);
    effects
}

fn with_random_decoder(mut sae: InferenceSae) -> InferenceSae {
    let d_in = sae.layers * sae.d_model;
    let w: Vec<f32> = (0..sae.n * d_in)
        .map(|i| ((i * 2654435761usize) % 997) as f32 / 997.0 - 0.5)
        .collect();
    sae.weights.w_dec = Tensor::from_vec(w, (sae.n, d_in), &Device::Cpu).unwrap();
    sae
}

#[test]
fn promoted_and_suppressed_tokens_are_the_decoder_row_through_the_unembedding() {
    const VOCAB: usize = 50;
    for (arch, layers) in [(Arch::Batchtopk, 1), (Arch::Crosscoder, 2)] {
        let sae = with_random_decoder(planted(arch, &[Some(3), Some(1), None], layers, vec![]));
        let d = sae.d_model;
        let wte_values = embedding(VOCAB, d);
        let wte = Tensor::from_vec(wte_values.clone(), (VOCAB, d), &Device::Cpu).unwrap();
        let opts = FeatureOptions {
            requested: vec![2],
            output_tokens: 6,
            ..FeatureOptions::default()
        };
        let f = run_with(&sae, &opts, &Unembedding::Tied(&wte)).unwrap();
        assert!(f.output_tokens_missing.is_none());
        assert_eq!(f.latents.len(), 3, "two sampled, the dead one asked for");
        let tok = Gpt2Tokenizer::new().unwrap();
        for l in &f.latents {
            for (got, largest) in [(&l.promoted, true), (&l.suppressed, false)] {
                let want = reference_effects(&sae, &wte_values, VOCAB, l.index, 6, largest);
                let ids: Vec<u32> = got.iter().map(|t| t.token_id).collect();
                let want_ids: Vec<u32> = want.iter().map(|w| w.0).collect();
                assert_eq!(
                    ids, want_ids,
                    "{arch:?} latent {} largest={largest}",
                    l.index
                );
                for (t, w) in got.iter().zip(&want) {
                    assert!(
                        (t.value as f64 - w.1).abs() < 1e-5,
                        "{} vs {}",
                        t.value,
                        w.1
                    );
                    assert_eq!(t.token, tok.decode(&[t.token_id]).unwrap());
                }
            }
            let h = l.logit_histogram.as_ref().unwrap();
            assert_eq!(h.total(), VOCAB as u64, "every token's effect is binned");
        }
    }
    // Without an unembedding the dashboards say why.
    let sae = planted(Arch::Batchtopk, &[Some(3)], 1, vec![]);
    let f = run(&sae, &FeatureOptions::default());
    assert_eq!(
        f.output_tokens_missing.as_deref(),
        Some("no model in this test")
    );
    assert!(f
        .latents
        .iter()
        .all(|l| l.promoted.is_empty() && l.logit_histogram.is_none()));
}

#[test]
fn histograms_hold_every_nonzero_activation_and_samples_lie_in_their_intervals() {
    let sae = planted(
        Arch::Batchtopk,
        &[Some(3), Some(0), None, Some(1), Some(2)],
        1,
        vec![],
    );
    let opts = FeatureOptions {
        quantile_bins: 4,
        quantile_examples: 2,
        histogram_bins: 6,
        ..FeatureOptions::default()
    };
    let f = run(&sae, &opts);
    for l in &f.latents {
        let fired = (l.density * f.n_tokens as f64).round() as u64;
        let h = l.activation_histogram.as_ref().unwrap();
        assert_eq!(h.total(), fired, "latent {}", l.index);
        assert_eq!(h.counts.len(), 6);
        let max = l.examples[0].max_activation();
        assert_eq!(
            h.edges,
            (0..=6).map(|i| max * i as f32 / 6.0).collect::<Vec<_>>()
        );
        assert_eq!(l.quantiles.len(), 4);
        assert_eq!(l.quantiles.iter().map(|q| q.count).sum::<u64>(), fired);
        for q in &l.quantiles {
            assert!(
                q.examples.len() as u64 == q.count.min(2),
                "latent {}: {q:?}",
                l.index
            );
            for ex in &q.examples {
                let v = ex.activations[ex.focus];
                assert!(
                    v > 0.0 && q.lower <= v && v <= q.upper,
                    "{v} outside [{}, {}]",
                    q.lower,
                    q.upper
                );
                assert_eq!(ex.tokens.len(), ex.activations.len());
                assert_eq!(
                    ex.token_ids,
                    contexts_tokens(ex.context, ex.start, ex.start + ex.tokens.len())
                );
            }
        }
    }
    // Latent 0 fires at 1 (token 3, twice), 2 (token 11) and 3 (token 19): intervals of width 0.75.
    let planted = f.latents.iter().find(|l| l.index == 0).unwrap();
    let counts: Vec<u64> = planted.quantiles.iter().map(|q| q.count).collect();
    assert_eq!(counts, vec![0, 2, 1, 1]);
    let peaks: Vec<Vec<u32>> = planted
        .quantiles
        .iter()
        .map(|q| q.examples.iter().map(|e| e.token_ids[e.focus]).collect())
        .collect();
    assert_eq!(peaks, vec![vec![], vec![3, 3], vec![11], vec![19]]);
}

#[test]
fn latents_asked_for_by_index_are_built_and_checked() {
    let sae = planted(
        Arch::Batchtopk,
        &[Some(3), Some(0), None, Some(1)],
        1,
        vec![],
    );
    let opts = FeatureOptions {
        latents: 1,
        requested: vec![2, 0, 3],
        ..FeatureOptions::default()
    };
    let f = run(&sae, &opts);
    let got: Vec<(usize, bool)> = f.latents.iter().map(|l| (l.index, l.requested)).collect();
    assert_eq!(
        got,
        vec![(3, false), (2, true), (0, true)],
        "the densest sampled, then the others asked for in order"
    );
    let dead = &f.latents[1];
    assert_eq!(dead.density, 0.0);
    assert_eq!(dead.density_rank, 3, "dead latents rank last");
    assert!(dead.examples.is_empty() && dead.quantiles.is_empty());
    assert!(dead.activation_histogram.is_none());
    assert_eq!(f.dead_latents, vec![2]);

    let bad = FeatureOptions {
        requested: vec![4],
        ..FeatureOptions::default()
    };
    let err = run_with(&sae, &bad, &Unembedding::Missing(String::new()))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("latent 4") && err.contains("4 latents"),
        "{err}"
    );
}

/// The keys of SAEDashboard's `NeuronpediaDashboardFeature.to_dict()` and
/// `NeuronpediaDashboardActivation.to_dict()`.
const NP_FEATURE_KEYS: [&str; 24] = [
    "feature_index",
    "neuron_alignment_indices",
    "neuron_alignment_values",
    "neuron_alignment_l1",
    "correlated_neurons_indices",
    "correlated_neurons_l1",
    "correlated_neurons_pearson",
    "correlated_features_indices",
    "correlated_features_l1",
    "correlated_features_pearson",
    "neg_str",
    "neg_values",
    "pos_str",
    "pos_values",
    "frac_nonzero",
    "freq_hist_data_bar_values",
    "freq_hist_data_bar_heights",
    "logits_hist_data_bar_heights",
    "logits_hist_data_bar_values",
    "n_prompts_total",
    "n_tokens_in_prompt",
    "dataset",
    "decoder_weights_dist",
    "activations",
];
const NP_ACTIVATION_KEYS: [&str; 5] = ["bin_min", "bin_max", "bin_contains", "tokens", "values"];

#[test]
fn the_neuronpedia_export_has_saedashboards_shape() {
    let sae = with_random_decoder(planted(
        Arch::Batchtopk,
        &[Some(3), Some(0), None, Some(1)],
        1,
        vec![],
    ));
    let wte = Tensor::from_vec(embedding(50, D), (50, D), &Device::Cpu).unwrap();
    let opts = FeatureOptions {
        quantile_bins: 3,
        ..FeatureOptions::default()
    };
    let f = run_with(&sae, &opts, &Unembedding::Tied(&wte)).unwrap();
    let source = sae::neuronpedia::Source {
        model_id: "gpt2".into(),
        layer: 0,
        hook_name: "blocks.0.hook_resid_post".into(),
        sae_set: "sparsetrain-resid_post".into(),
        sae_path: "blocks.0.hook_resid_post".into(),
        dataset: "default".into(),
        d_sae: 4,
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = sae::neuronpedia::export(&f, &source, tmp.path()).unwrap();
    assert_eq!(
        dir,
        tmp.path()
            .join("gpt2_sparsetrain-resid_post_blocks.0.hook_resid_post_4")
    );
    let read = |name: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(dir.join(name)).unwrap()).unwrap()
    };
    let batch = read("batch-0.json");
    assert_eq!(batch["model_id"], "gpt2");
    assert_eq!(batch["layer"], 0);
    assert_eq!(batch["sae_set"], "sparsetrain-resid_post");
    let features = batch["features"].as_array().unwrap();
    assert_eq!(features.len(), f.latents.len());
    for (feature, latent) in features.iter().zip(&f.latents) {
        let keys: BTreeSet<&str> = feature
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, NP_FEATURE_KEYS.into_iter().collect::<BTreeSet<_>>());
        assert_eq!(feature["feature_index"], latent.index);
        assert_eq!(feature["frac_nonzero"], latent.density);
        assert_eq!(feature["n_prompts_total"], 6);
        assert_eq!(feature["n_tokens_in_prompt"], T);
        assert_eq!(feature["pos_str"].as_array().unwrap().len(), 10);
        assert!(feature["pos_str"][0].is_string() && feature["neg_values"][0].is_f64());
        let heights = feature["freq_hist_data_bar_heights"].as_array().unwrap();
        assert_eq!(
            heights.len(),
            feature["freq_hist_data_bar_values"]
                .as_array()
                .unwrap()
                .len()
        );
        let total: f64 = heights.iter().map(|h| h.as_f64().unwrap()).sum();
        assert_eq!(total, (latent.density * f.n_tokens as f64).round());
        let acts = feature["activations"].as_array().unwrap();
        let quantile_samples: usize = latent.quantiles.iter().map(|q| q.examples.len()).sum();
        assert_eq!(acts.len(), latent.examples.len() + quantile_samples);
        for (i, a) in acts.iter().enumerate() {
            let keys: BTreeSet<&str> = a.as_object().unwrap().keys().map(String::as_str).collect();
            assert_eq!(
                keys,
                NP_ACTIVATION_KEYS.into_iter().collect::<BTreeSet<_>>()
            );
            assert_eq!(
                a["tokens"].as_array().unwrap().len(),
                a["values"].as_array().unwrap().len()
            );
            if i < latent.examples.len() {
                assert_eq!(
                    (a["bin_min"].as_f64(), a["bin_contains"].as_f64()),
                    (Some(-1.0), Some(-1.0))
                );
            } else {
                let c = a["bin_contains"].as_f64().unwrap();
                assert!(c > 0.0 && c <= 1.0);
            }
        }
    }
    let settings = read("run_settings.json");
    assert_eq!(settings["model_id"], "gpt2");
    assert_eq!(settings["n_quantiles"], 3);
    let skipped = read("skipped_indexes.json");
    assert_eq!(skipped["skipped_indexes"], serde_json::json!([2]));
    assert_eq!(skipped["layer"], "0");
}
