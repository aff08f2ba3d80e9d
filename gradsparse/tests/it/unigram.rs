//! The unigram baseline: add-α cross-entropy and its best α.
use gradsparse::data::{unigram_entropy, Unigram};

#[test]
fn cross_entropy_on_the_training_tokens_tends_to_their_entropy() {
    let train: Vec<u32> = [0u32, 0, 0, 1, 1, 2, 3, 3].to_vec();
    let model = Unigram::fit(train.iter().copied(), 10);
    let h = unigram_entropy(train.iter().copied());
    let ce = model.cross_entropy(&train, 1e-9);
    assert!((ce - h).abs() < 1e-6, "{ce} vs {h}");
    // Smoothing moves mass to unseen tokens, which costs on seen ones.
    assert!(model.cross_entropy(&train, 1.0) > ce);
}

#[test]
fn best_alpha_is_no_worse_than_any_fixed_alpha() {
    let train: Vec<u32> = (0..1000u32).map(|i| (i * i) % 37).collect();
    // Held-out tokens include ids never seen in training (an infinite loss at α = 0).
    let heldout: Vec<u32> = (0..300u32).map(|i| (i * 7) % 50).collect();
    let model = Unigram::fit(train.iter().copied(), 64);
    let best = model.best_cross_entropy(&heldout);
    assert!(best.is_finite());
    for alpha in [1e-6, 1e-3, 0.01, 0.1, 0.5, 1.0, 2.0, 10.0] {
        let ce = model.cross_entropy(&heldout, alpha);
        assert!(best <= ce + 1e-9, "best {best} > {ce} at alpha {alpha}");
    }
    // Out-of-vocabulary ids widen the vocabulary instead of panicking.
    let wide = Unigram::fit([70u32, 1, 1], 64);
    assert!(wide.cross_entropy(&[70, 1], 0.5).is_finite());
}

#[test]
fn eval_contexts_are_spread_over_the_held_out_documents() {
    use candle_core::Device;
    use gradsparse::data::{Batches, EVAL_BATCH};
    use gradsparse::FinetuneConfig;
    let cfg = FinetuneConfig::from_toml("[data]\ncontext = 64\n[train]\nbatch_size = 2\n").unwrap();
    let (batches, entropy) = Batches::from_config(&cfg, 50257).unwrap();
    assert!(entropy.is_some());
    let rows = |m: usize| -> Vec<Vec<u32>> {
        let parts = batches.eval_batches(m, &Device::Cpu).unwrap();
        assert!(parts.iter().all(|p| p.dim(0).unwrap() <= EVAL_BATCH.max(2)));
        parts
            .iter()
            .flat_map(|p| p.to_vec2::<u32>().unwrap())
            .collect()
    };
    let all = rows(usize::MAX);
    let n = all.len();
    assert!(n > 100, "{n} held-out contexts");
    let four = rows(4);
    let expected: Vec<Vec<u32>> = (0..4).map(|i| all[i * n / 4].clone()).collect();
    assert_eq!(four, expected);
    // The baseline is scored on the same contexts and is a plausible unigram loss.
    let u = batches.unigram_eval_loss(4, 50257).unwrap();
    assert!(u > 3.0 && u < 10.0, "{u}");
}
