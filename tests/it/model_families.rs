//! extract and train-sae on a model that is not GPT-2: the tiny Llama of models/tests/fixtures (its
//! own byte-level tokenizer.json and BOS), activations written to shards and an SAE trained on the fly
//! with the held-out evaluation (CE and KL with the SAE spliced in).
use activations::shards::{extract, ExtractConfig, ExtractOptions, Manifest};
use std::path::{Path, PathBuf};

fn llama_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("models/tests/fixtures/llama")
}

/// 40 documents of 200 characters, so some are held out.
fn corpus(dir: &Path) -> PathBuf {
    let path = dir.join("corpus.jsonl");
    let text: Vec<char> = activations::corpus::default_corpus().documents[0]
        .text
        .chars()
        .take(8_000)
        .collect();
    let lines: Vec<String> = text
        .chunks(200)
        .map(|c| serde_json::json!({ "text": c.iter().collect::<String>() }).to_string())
        .collect();
    std::fs::write(&path, lines.join("\n")).unwrap();
    path
}

#[test]
fn extract_reads_a_llama_with_its_tokenizer() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        r#"
model = "{}"
out_dir = "{}"
hook_points = ["blocks.0.hook_mlp_out", "blocks.1.hook_resid_post"]
tokens_per_shard = 300
batch_contexts = 4
[data]
corpus = "{}"
split = "all"
context = 16
max_tokens = 600
"#,
        llama_fixture().display(),
        dir.path().join("acts").display(),
        corpus(dir.path()).display()
    );
    let cfg = ExtractConfig::from_toml(&text, Path::new("test.toml")).unwrap();
    let report = extract(&cfg, &ExtractOptions::default()).unwrap();
    let m: Manifest = report.manifest;
    assert_eq!((m.d_model, m.total_tokens, m.shards.len()), (64, 600, 2));
    assert_eq!(m.model_config["model_type"], "llama");
    assert_eq!(m.hook_points[0].to_string(), "blocks.0.hook_mlp_out");
}

#[test]
fn train_sae_on_the_fly_from_a_llama() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        r#"
name = "llama-fixture"
[data]
source = "model"
model = "{}"
corpus = "{}"
layers = [1]
context = 16
held_out_tokens = 64
buffer_tokens = 256
[sae]
latents = 64
k = 4
[train]
batch_size = 32
steps = 2
[eval]
ce_contexts = 2
[log]
progress = false
"#,
        llama_fixture().display(),
        corpus(dir.path()).display()
    );
    let cfg = dir.path().join("cfg.toml");
    std::fs::write(&cfg, text).unwrap();
    let summary = sae::run::train_sae(&sae::run::RunOptions {
        config: cfg,
        out: Some(dir.path().join("run")),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(summary.step, 2);
    assert!(summary.final_eval.is_some(), "the held-out evaluation ran");
    let sae_cfg = find(&summary.run_dir, "cfg.json").expect("the SAE's cfg.json");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(sae_cfg).unwrap()).unwrap();
    assert_eq!(json["hook_name"], "blocks.1.hook_resid_post");
    assert_eq!(json["context_size"], 16);
    assert_eq!(json["prepend_bos"], true);
}

fn find(dir: &Path, name: &str) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()? {
        let path = entry.ok()?.path();
        if path.is_dir() {
            if let Some(found) = find(&path, name) {
                return Some(found);
            }
        } else if path.file_name().is_some_and(|n| n == name) {
            return Some(path);
        }
    }
    None
}
