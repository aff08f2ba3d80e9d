//! Feature dashboards on a planted SAE: inputs are one-hot codes of the tokens, so which latent fires
//! where, and how strongly, is known exactly.
use activations::tokenizer::END_OF_TEXT;
use activations::Gpt2Tokenizer;
use candle_core::{Device, Tensor};
use sae::checkpoint::Exported;
use sae::config::Arch;
use sae::features::{build, FeatureOptions, HeldoutContexts, InferenceSae};

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
    let tokens = contexts();
    let data = HeldoutContexts {
        activations: &embed,
        tokens: &tokens,
        context_len: T,
        model: None,
    };
    let tok = Gpt2Tokenizer::new().unwrap();
    build(sae, &data, &tok, &["blocks.0.hook_resid_post".into()], opts).unwrap()
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
