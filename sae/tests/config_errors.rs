//! A bad config value is an error that names its key.
mod common;
use common::synthetic_config;
use sae::Config;

fn err(text: &str) -> String {
    Config::from_toml(text)
        .expect_err("config must be rejected")
        .to_string()
}

#[test]
fn valid_configs_parse() {
    Config::from_toml(&synthetic_config("batchtopk", "", 1)).unwrap();
    Config::from_toml(&synthetic_config(
        "matryoshka",
        "group_sizes = [16, 16, 32]",
        1,
    ))
    .unwrap();
    Config::from_toml(&synthetic_config("crosscoder", "", 3)).unwrap();
    let dense = synthetic_config("batchtopk", "", 1)
        .replace("dead_tokens = 512", "dead_tokens = 512\ndecode = \"dense\"");
    assert_eq!(
        Config::from_toml(&dense).unwrap().sae.aux.decode,
        sae::config::AuxDecode::Dense
    );
    for f in ["../configs/tiny.toml", "../configs/gpt2xl.toml"] {
        Config::from_path(std::path::Path::new(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    }
}

#[test]
fn errors_name_the_key() {
    let base = synthetic_config("batchtopk", "", 1);
    let cases = [
        (base.replace("k = 4", "k = 0"), "sae.k"),
        (base.replace("k = 4", "k = 65"), "sae.k"),
        (
            base.replace("latents = 64", "latents = 64\nlatentz = 3"),
            "latentz",
        ),
        (base.replace("lr = 3e-3", "lr = -1.0"), "train.lr"),
        (
            base.replace("batch_size = 64", "batch_size = 0"),
            "train.batch_size",
        ),
        (
            base.replace("steps = 12", "steps = 12\nwarmup = 3"),
            "warmup",
        ),
        (
            base.replace("[log]", "[selector]\nkind = \"heap\"\n[log]"),
            "heap",
        ),
        (
            base.replace(
                "[log]",
                "[selector]\ncompare = true\ncompare_with = \"profk\"\n[log]",
            ),
            "selector.compare_with",
        ),
        (
            base.replace("dead_tokens = 512", "dead_tokens = 512\ncoefficient = -1.0"),
            "sae.aux.coefficient",
        ),
        (base.replace("every = 3", "every = 0"), "log.every"),
        (
            base.replace("active_per_token = 3", "active_per_token = 100"),
            "data.active_per_token",
        ),
        (
            synthetic_config("matryoshka", "group_sizes = [16, 16]", 1),
            "sae.group_sizes",
        ),
        (
            synthetic_config("batchtopk", "group_sizes = [64]", 1),
            "sae.group_sizes",
        ),
        (synthetic_config("crosscoder", "", 1), "data.layers"),
        (synthetic_config("batchtopk", "", 2), "data.layers"),
        (
            base.replace("[train]", "[train]\nprecision = \"tf32\""),
            "train.precision",
        ),
        (
            base.replace("dead_tokens = 512", "dead_tokens = 512\ndecode = \"pairs\""),
            "sae.aux.decode",
        ),
    ];
    for (text, key) in cases {
        let msg = err(&text);
        assert!(
            msg.contains(key),
            "error for `{key}` does not name it: {msg}"
        );
    }
}
