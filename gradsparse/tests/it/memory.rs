//! A fine-tuning run whose activations cannot fit is refused from the config, with the numbers, before
//! the trainer allocates and before a run directory exists.
use gradsparse::run::{finetune, RunOptions};

#[test]
fn a_batch_too_large_for_memory_is_refused_with_the_numbers() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("big.toml");
    std::fs::write(
        &cfg,
        "name = \"big\"\n[model]\nname = \"tiny\"\ninit = \"random\"\n\
         [data]\nsynthetic = true\ncontext = 64\n[train]\nbatch_size = 1000000\nsteps = 1\n",
    )
    .unwrap();
    let out = tmp.path().join("run");
    let opts = RunOptions {
        out: Some(out.clone()),
        ..RunOptions::default()
    };
    let err = finetune(&cfg, &opts)
        .expect_err("must be refused")
        .to_string();
    assert!(
        err.contains("train.batch_size") && err.contains("available") && err.contains("TiB"),
        "{err}"
    );
    assert!(!out.exists(), "a refused start left {}", out.display());
}
