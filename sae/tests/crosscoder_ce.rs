//! CE-loss recovered for a crosscoder: its reconstruction of every layer spliced into the tiny GPT-2 at every
//! hook point in one forward, checked against identity and layer-swapped stand-ins, against single-hook
//! splices computed by hand, and present in a run's final eval.
mod common;
use candle_core::{Device, Tensor};
use eval::measures::ce_splices;
use gpt2::HookPoint;
use sae::run::{ce_loss_recovered, Data};
use sae::{Config, Trainer};
use std::{path::Path, sync::OnceLock};

/// configs/tiny.toml shrunk to a few quick steps and 3 CE contexts of 32 tokens, as a crosscoder over the
/// residual stream after layers 1 and 3.
fn tiny_crosscoder_toml() -> String {
    common::quick_tiny_config(&[
        ("arch = \"batchtopk\"", "arch = \"crosscoder\""),
        ("layers = [2]", "layers = [1, 3]"),
        ("context = 64", "context = 32"),
    ]) + "\n[eval]\nce_contexts = 3\n"
}

/// One data directory for the whole test binary, with the tiny model written to it before any test loads it.
fn home() -> &'static Path {
    static HOME: OnceLock<tempfile::TempDir> = OnceLock::new();
    HOME.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        std::env::set_var("SPARSETRAIN_CACHE", dir.path());
        activations::tiny::default_model(&Device::Cpu).unwrap();
        dir
    })
    .path()
}

fn rel_diff(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs().max(1e-12)
}

#[test]
fn crosscoder_run_reports_ce_loss_recovered() {
    let dir = tempfile::tempdir_in(home()).unwrap();
    let s = common::run(dir.path(), &tiny_crosscoder_toml(), false);
    let m = s.final_eval.unwrap();
    let per_layer = [
        "ce_sae_layer0",
        "ce_zero_ablation_layer0",
        "ce_loss_recovered_layer0",
        "ce_sae_layer1",
        "ce_zero_ablation_layer1",
        "ce_loss_recovered_layer1",
    ];
    for key in common::FINAL_EVAL_KEYS.into_iter().chain(per_layer) {
        let v = m.get(key).copied().unwrap_or(f64::NAN);
        assert!(v.is_finite(), "{key} = {v}");
    }
    assert!(!m.contains_key("ce_loss_recovered_layer2"));
    let recovered = (m["ce_zero_ablation"] - m["ce_sae"]) / (m["ce_zero_ablation"] - m["ce_clean"]);
    assert!(rel_diff(m["ce_loss_recovered"], recovered) < 1e-12);
    // The tiny model has random weights: zeroing need not hurt it, so only the spliced loss is checked.
    assert!(m["ce_sae"] != m["ce_clean"]);
}

/// A crosscoder trained for a few steps on the tiny model, and the splice its run would evaluate.
fn trained_crosscoder() -> (Trainer, sae::run::Splice) {
    home();
    let cfg = Config::from_toml(&tiny_crosscoder_toml()).unwrap();
    let mut data = Data::open(&cfg, &Device::Cpu).unwrap();
    let batch = cfg.train.batch_size;
    let first = data.next_train(batch).unwrap();
    let mut trainer = Trainer::new(cfg, &first, &Device::Cpu).unwrap();
    trainer.train_step(&first, false).unwrap();
    for _ in 0..3 {
        let raw = data.next_train(batch).unwrap();
        trainer.train_step(&raw, false).unwrap();
    }
    (trainer, data.splice.expect("a model source has a splice"))
}

#[test]
fn crosscoder_splice_matches_single_hook_splices_by_hand() {
    let (trainer, splice) = trained_crosscoder();
    assert_eq!(
        splice.hooks,
        [HookPoint::ResidPost(1), HookPoint::ResidPost(3)]
    );
    let ce = ce_loss_recovered(&trainer, &splice).unwrap();
    assert_eq!(ce.per_layer.len(), 2);

    // By hand: the crosscoder reads the clean stream of both layers (positions 1..), scaled per layer; each
    // layer's slice of its JumpReLU reconstruction, unscaled, goes in at that layer's hook alone, BOS kept.
    let (model, tokens) = (&splice.model, &splice.tokens);
    let (b, t) = tokens.dims2().unwrap();
    let acts = model.forward_hooks(tokens, &splice.hooks).unwrap();
    let d = acts[0].dim(2).unwrap();
    let x = Tensor::cat(
        &acts
            .iter()
            .zip(&trainer.scales)
            .map(|(a, s)| {
                a.narrow(1, 1, t - 1)
                    .unwrap()
                    .reshape((b * (t - 1), d))
                    .unwrap()
                    .affine(*s, 0.0)
                    .unwrap()
            })
            .collect::<Vec<_>>(),
        1,
    )
    .unwrap();
    let (recon, _) = trainer
        .sae
        .reconstruct_threshold(&x, trainer.threshold.max(0.0))
        .unwrap();
    let loss = |logits: Tensor| -> f64 {
        gpt2::Gpt2::next_token_loss(&logits, tokens)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap() as f64
    };
    let clean = loss(model.forward_logits(tokens).unwrap());
    assert!(rel_diff(ce.per_layer[0].clean, clean) < 1e-6);
    assert!(rel_diff(ce.all.clean, clean) < 1e-6);
    let zero_out = |h: &Tensor| h.zeros_like();
    for (l, hook) in splice.hooks.iter().enumerate() {
        let layer = recon
            .narrow(1, l * d, d)
            .unwrap()
            .affine(1.0 / trainer.scales[l], 0.0)
            .unwrap()
            .reshape((b, t - 1, d))
            .unwrap();
        let put = |h: &Tensor| Tensor::cat(&[&h.narrow(1, 0, 1)?, &layer], 1);
        let spliced = loss(model.forward_logits_patched(tokens, *hook, &put).unwrap());
        let zero = loss(
            model
                .forward_logits_patched(tokens, *hook, &zero_out)
                .unwrap(),
        );
        let got = ce.per_layer[l];
        assert!(
            rel_diff(got.spliced, spliced) < 1e-5,
            "layer {l}: {got:?} vs {spliced}"
        );
        assert!(
            rel_diff(got.zero, zero) < 1e-5,
            "layer {l}: {got:?} vs {zero}"
        );
        assert!(
            (got.spliced - clean).abs() > 1e-4,
            "layer {l}: a few steps cannot be lossless"
        );
    }
    // The residual stream at the last hook point carries everything downstream: splicing every hook point
    // at once (reconstructions from the clean stream) ends as the last layer's splice alone.
    assert!(rel_diff(ce.all.spliced, ce.per_layer[1].spliced) < 1e-5);
    assert!(rel_diff(ce.all.zero, ce.per_layer[1].zero) < 1e-5);
}

#[test]
fn identity_reconstruction_recovers_everything_and_swapped_layers_do_not() {
    home();
    let cfg = Config::from_toml(&tiny_crosscoder_toml()).unwrap();
    let splice = Data::open(&cfg, &Device::Cpu).unwrap().splice.unwrap();
    let (model, tokens, hooks) = (&splice.model, &splice.tokens, &splice.hooks);
    let identity = |raw: &Tensor| Ok(raw.clone());
    let ce = ce_splices(model, tokens, hooks, &identity).unwrap();
    assert_eq!(ce.all.spliced, ce.all.clean);
    assert_eq!(ce.all.recovered(), 1.0);
    for layer in &ce.per_layer {
        assert_eq!(layer.recovered(), 1.0, "{layer:?}");
    }
    assert!((ce.all.zero - ce.all.clean).abs() > 1e-3, "{:?}", ce.all);

    // Layer 0's activations put in at layer 1's hook and back: the splice must notice.
    let swapped = |raw: &Tensor| {
        Ok(Tensor::cat(
            &[&raw.narrow(1, 1, 1)?, &raw.narrow(1, 0, 1)?],
            1,
        )?)
    };
    let ce = ce_splices(model, tokens, hooks, &swapped).unwrap();
    for c in [&ce.all, &ce.per_layer[0], &ce.per_layer[1]] {
        assert!((c.spliced - c.clean).abs() > 1e-4, "{c:?}");
        assert!((c.recovered() - 1.0).abs() > 1e-3, "{c:?}");
    }

    // A reconstruction of the wrong shape is refused.
    let flat = |raw: &Tensor| Ok(raw.flatten_from(1)?);
    let err = ce_splices(model, tokens, hooks, &flat)
        .unwrap_err()
        .to_string();
    assert!(err.contains("reconstruction has shape"), "{err}");
}
