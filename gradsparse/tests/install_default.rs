//! `finetune` replaces the default tiny model only when asked (`--install-default`), never by
//! config. Its own test binary: it points $SPARSETRAIN_CACHE at a scratch directory.
use gradsparse::run::{finetune, RunOptions};

const QUICK: &str = r#"
name = "install"
seed = 3
[data]
context = 16
[train]
batch_size = 1
steps = 1
[sparsify]
density = 0.01
[log]
progress = false
"#;

#[test]
fn the_default_model_changes_only_with_the_flag() {
    let cache = tempfile::tempdir().unwrap();
    std::env::set_var("SPARSETRAIN_CACHE", cache.path());
    let installed = activations::tiny::model_dir();
    assert!(installed.starts_with(cache.path()));
    std::fs::create_dir_all(&installed).unwrap();
    let weights = installed.join("model.safetensors");
    std::fs::write(&weights, b"the user's model").unwrap();

    let root = tempfile::tempdir().unwrap();
    let config = root.path().join("quick.toml");
    std::fs::write(&config, QUICK).unwrap();
    let opts = |out: &str, install_default: bool| RunOptions {
        out: Some(root.path().join(out)),
        install_default,
        ..Default::default()
    };
    let plain = finetune(&config, &opts("plain", false)).unwrap();
    assert_eq!(plain.installed_tiny, None);
    assert_eq!(std::fs::read(&weights).unwrap(), b"the user's model");

    let asked = finetune(&config, &opts("asked", true)).unwrap();
    assert_eq!(asked.installed_tiny.as_deref(), Some(installed.as_path()));
    assert_ne!(std::fs::read(&weights).unwrap(), b"the user's model");

    // The old config key is refused, naming the flag.
    std::fs::write(
        &config,
        QUICK.replace("steps = 1", "steps = 1\ninstall_tiny_default = true"),
    )
    .unwrap();
    let err = finetune(&config, &opts("old", false))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("train.install_tiny_default") && err.contains("--install-default"),
        "{err}"
    );
    // Only the tiny shape can be installed.
    std::fs::write(
        &config,
        QUICK.replace("[data]", "[model]\nname = \"gpt2\"\n[data]"),
    )
    .unwrap();
    let err = finetune(&config, &opts("gpt2", true))
        .unwrap_err()
        .to_string();
    assert!(err.contains("--install-default"), "{err}");
}
