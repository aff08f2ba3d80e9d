//! A bad config value is an error that names its key.
use crate::common;
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
    for f in [
        "../configs/tiny.toml",
        "../configs/gpt2xl.toml",
        "../configs/llama-3.1-8b-l16.toml",
        "../configs/gemma-2-2b-l12.toml",
    ] {
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
                "[selector]\ncompare = true\ncompare_every = 0\n[log]",
            ),
            "selector.compare_every",
        ),
        (
            base.replace("lr = 3e-3", "lr = 3e-3\nadam_eps = 1e-6"),
            "renamed to `train.eps`",
        ),
        (
            base.replace("lr = 3e-3", "lr = 3e-3\neps = 0.0"),
            "train.eps",
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

/// The keys train-sae shares with extract and finetune, with the same defaults.
#[test]
fn the_shared_vocabulary_is_accepted_with_the_shared_defaults() {
    let model = |extra: &str| {
        format!(
            "name = \"t\"\n[data]\nsource = \"model\"\nmodel = \"tiny\"\nlayers = [1]\n{extra}\n\
             [sae]\nlatents = 64\nk = 4\n[train]\nbatch_size = 64\nsteps = 2\n"
        )
    };
    let cfg = Config::from_toml(&model("")).unwrap();
    let sae::config::DataConfig::Model {
        held_out_fraction, ..
    } = cfg.data
    else {
        panic!("a model source")
    };
    assert_eq!(
        held_out_fraction,
        activations::corpus::DEFAULT_HELD_OUT_FRACTION
    );
    assert_eq!(cfg.selector, harness::SelectorConfig::default());
    assert_eq!(
        cfg.train.keep_checkpoints,
        harness::train_loop::DEFAULT_KEEP_CHECKPOINTS
    );
    let cfg = Config::from_toml(&model("held_out_fraction = 0.25")).unwrap();
    assert!(matches!(
        cfg.data,
        sae::config::DataConfig::Model { held_out_fraction, .. } if held_out_fraction == 0.25
    ));
    let bad = err(&model("held_out_fraction = 1.0"));
    assert!(bad.contains("data.held_out_fraction"), "{bad}");
    let renamed = err(&model("eval_fraction = 0.2"));
    assert!(
        renamed.contains("renamed to `data.held_out_fraction`"),
        "{renamed}"
    );
}
