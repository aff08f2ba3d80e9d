//! The readers of untrusted files (shard headers, manifest.json) under random and mutated input: they
//! return an error, never panic, and never allocate what a header merely claims.
//!
//! Case counts (100 000 in all, a few seconds): header_len 30 000, parse_header on random bytes 20 000,
//! on mutated valid headers 30 000, Manifest::parse on mutated manifests 20 000.
use activations::corpus::Split;
use activations::shards::{
    header_len, parse_header, CorpusInfo, Manifest, ShardInfo, MAX_HEADER_BYTES,
};
use gpt2::{Gpt2Config, HookPoint};
use proptest::prelude::*;
use std::path::Path;

fn cases(n: u32) -> ProptestConfig {
    ProptestConfig {
        cases: n,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// A header as `shard_file::write` makes it, with chosen (possibly absurd) numbers.
fn header(dtype: &str, shape: [u64; 3], acts: [u64; 2], tokens: [u64; 2], n_tok: u64) -> Vec<u8> {
    let meta = r#"{"fingerprint":"ab","index":3}"#;
    serde_json::to_vec(&serde_json::json!({
        "__metadata__": { "sparsetrain": meta },
        "activations": { "dtype": dtype, "shape": shape, "data_offsets": acts },
        "tokens": { "dtype": "U32", "shape": [n_tok], "data_offsets": tokens },
    }))
    .unwrap()
}

fn valid_manifest() -> String {
    let shards = (0..3)
        .map(|i| ShardInfo {
            file: format!("shard-{i:05}.safetensors"),
            n_tokens: if i < 2 { 100 } else { 50 },
            sha256: "0".repeat(64),
        })
        .collect();
    let m = Manifest {
        format: activations::shards::FORMAT.into(),
        model: "tiny".into(),
        model_config: serde_json::to_value(Gpt2Config::tiny()).unwrap(),
        model_dtype: "f32".into(),
        hook_points: vec![HookPoint::ResidPost(2)],
        d_model: Gpt2Config::tiny().n_embd,
        dtype: "f32".into(),
        context_len: 16,
        prepend_bos: true,
        drop_bos: true,
        tokens_per_shard: 100,
        total_tokens: 250,
        corpus: CorpusInfo {
            spec: "default".into(),
            split: Split::Train,
            heldout_fraction: 0.1,
            fingerprint: "f".into(),
            documents: 3,
        },
        fingerprint: "ab".into(),
        shards,
        model_sha256: Some("sha256:00".into()),
    };
    serde_json::to_string_pretty(&m).unwrap()
}

#[test]
fn the_reference_inputs_pass() {
    let h = header("F32", [2, 1, 4], [0, 32], [32, 40], 2);
    let layout = parse_header(&h, 8 + h.len() as u64 + 40).unwrap();
    assert_eq!(layout.shape, [2, 1, 4]);
    assert!(
        parse_header(&h, 8 + h.len() as u64 + 39).is_err(),
        "truncated"
    );
    Manifest::parse(&valid_manifest(), Path::new("m.json")).unwrap();
    for (from, to) in [
        ("shard-00001.safetensors", "../../etc/passwd"),
        ("shard-00001.safetensors", "shard-00000.safetensors"),
        ("\"total_tokens\": 250", "\"total_tokens\": 251"),
    ] {
        let bad = valid_manifest().replacen(from, to, 1);
        assert!(Manifest::parse(&bad, Path::new("m.json")).is_err(), "{to}");
    }
}

proptest! {
    #![proptest_config(cases(30_000))]
    #[test]
    fn header_len_is_bounded(prefix in any::<[u8; 8]>(), file_len in any::<u64>()) {
        if let Ok(len) = header_len(prefix, file_len) {
            prop_assert!(len as u64 <= MAX_HEADER_BYTES && len as u64 + 8 <= file_len);
        }
    }
}

proptest! {
    #![proptest_config(cases(20_000))]
    #[test]
    fn parse_header_survives_random_bytes(
        bytes in proptest::collection::vec(any::<u8>(), 0..256),
        file_len in any::<u64>(),
    ) {
        let _ = parse_header(&bytes, file_len);
    }
}

fn big() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..64, any::<u64>(), Just(1u64 << 60), Just(u64::MAX)]
}

proptest! {
    #![proptest_config(cases(30_000))]
    #[test]
    fn parse_header_checks_mutated_headers(
        dtype in prop_oneof![Just("F32"), Just("BF16"), Just("F16"), Just("I64"), Just("")],
        shape in [big(), big(), big()],
        acts in [big(), big()],
        tokens in [big(), big()],
        n_tok in big(),
        file_len in prop_oneof![big(), 0u64..4096],
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut h = header(dtype, shape, acts, tokens, n_tok);
        if truncate {
            h.truncate(cut.index(h.len() + 1));
        }
        if let Ok(layout) = parse_header(&h, file_len) {
            // Whatever passes describes exactly the file's bytes.
            let size = if layout.dtype == "F32" { 4u128 } else { 2 };
            let [n, k, d] = layout.shape.map(|x| x as u128);
            prop_assert_eq!(8 + h.len() as u128 + n * k * d * size + 4 * n, file_len as u128);
        }
    }
}

proptest! {
    #![proptest_config(cases(20_000))]
    #[test]
    fn manifest_parse_survives_mutations(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut text = valid_manifest().into_bytes();
        for (at, byte) in &edits {
            let i = at.index(text.len());
            text[i] = *byte;
        }
        if truncate {
            text.truncate(cut.index(text.len() + 1));
        }
        let text = String::from_utf8_lossy(&text);
        if let Ok(m) = Manifest::parse(&text, Path::new("m.json")) {
            prop_assert!(m.shards.iter().all(|s| !s.file.contains('/')));
            prop_assert_eq!(m.shards.iter().map(|s| s.n_tokens).sum::<usize>(), m.total_tokens);
        }
    }
}
