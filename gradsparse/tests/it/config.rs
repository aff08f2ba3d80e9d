//! Config errors name the key at fault.
use gradsparse::FinetuneConfig;

fn error_of(toml: &str) -> String {
    FinetuneConfig::from_toml(toml).expect_err(toml).to_string()
}

#[test]
fn shipped_configs_parse() {
    for path in [
        "../configs/tiny-finetune.toml",
        "../configs/tiny-model-recipe.toml",
        "../configs/gpt2xl-finetune.toml",
    ] {
        let cfg = FinetuneConfig::from_file(std::path::Path::new(path)).unwrap();
        assert!(cfg.sparsify.density > 0.0, "{path}");
    }
}

#[test]
fn defaults_are_valid() {
    let cfg = FinetuneConfig::from_toml("").unwrap();
    assert_eq!(cfg.sparsify.density, 1e-3);
    assert_eq!(cfg.selector.compare_with(), None);
    assert_eq!(cfg.sparsify.mode, gradsparse::config::SparsifyMode::Topk);
    assert_eq!(cfg.selector_label(), "profk");
}

#[test]
fn errors_name_the_key() {
    let cases = [
        ("[sparsify]\ndensity = 0.0", "sparsify.density"),
        ("[sparsify]\ndensity = 1.5", "sparsify.density"),
        ("[sparsify]\ndensty = 0.1", "densty"),
        ("[sparsify]\nscope = \"layer\"", "scope"),
        ("[selector]\nkind = \"heap\"", "kind"),
        (
            "[selector]\ncompare = true\ncompare_every = 0",
            "selector.compare_every",
        ),
        ("[train]\nadam_eps = 1e-6", "renamed to `train.eps`"),
        (
            "[data]\neval_fraction = 0.2",
            "renamed to `data.held_out_fraction`",
        ),
        ("[train]\neps = 0.0", "train.eps"),
        ("[data]\nheld_out_fraction = 1.0", "data.held_out_fraction"),
        ("[model]\nname = \"gpt5\"", "model.name"),
        ("device = \"tpu\"", "cuda:N"),
        ("[model]\ndevice = \"cpu\"", "renamed to `device`"),
        ("[data]\nbatch = 2", "renamed to `train.batch_size`"),
        (
            "[train]\nlr_warmup_steps = 2",
            "renamed to `train.warmup_steps`",
        ),
        ("[data]\ncontext = 1", "data.context"),
        ("[data]\ncorpus = \"/no/such/corpus\"", "data.corpus"),
        ("[train]\nlr = -1.0", "train.lr"),
        ("[train]\nbeta2 = 1.0", "train.beta2"),
        ("[train]\nsteps = \"many\"", "steps"),
        ("[log]\nevery = 0", "log.every"),
        ("[optimizer]\nlr = 1.0", "optimizer"),
        ("[sparsify]\nmode = \"sparse\"", "mode"),
        (
            "[train]\ninstall_tiny_default = true",
            "`finetune --install-default`",
        ),
    ];
    for (toml, key) in cases {
        let err = error_of(toml);
        assert!(
            err.contains(key),
            "{toml:?} gave {err:?}, which does not name {key}"
        );
    }
}

#[test]
fn compare_defaults_to_the_other_selector() {
    let cfg = FinetuneConfig::from_toml("[selector]\ncompare = true").unwrap();
    assert_eq!(cfg.selector.compare_with(), Some(profk::Selector::Sort));
    let cfg = FinetuneConfig::from_toml("[selector]\nkind = \"sort\"\ncompare = true").unwrap();
    assert_eq!(cfg.selector.compare_with(), Some(profk::Selector::Profk));
    // The shipped config with one `--set selector.kind=sort` is the sort baseline, still checked.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, "[selector]\nkind = \"profk\"\ncompare = true\n").unwrap();
    let (cfg, _) = FinetuneConfig::load(&path, &["selector.kind=sort".into()]).unwrap();
    assert_eq!(cfg.selector.compare_with(), Some(profk::Selector::Profk));
    // A selector compared with itself: no comparison, and a note says so.
    let same =
        FinetuneConfig::from_toml("[selector]\ncompare = true\ncompare_with = \"profk\"").unwrap();
    assert_eq!(same.selector.compare_with(), None);
    assert!(same.selector.note().unwrap().contains("comparison is off"));
}

#[test]
fn shared_keys_have_the_same_defaults_as_train_sae() {
    let cfg = FinetuneConfig::from_toml("").unwrap();
    assert_eq!(cfg.selector, harness::SelectorConfig::default());
    assert_eq!(cfg.selector.compare_every, 100);
    assert_eq!(cfg.train.keep_checkpoints, 2);
    assert_eq!(cfg.data.held_out_fraction, 0.1);
    assert_eq!(cfg.train.eps, 1e-8);
}

#[test]
fn schedules() {
    let cfg = FinetuneConfig::from_toml(
        "[sparsify]\ndensity = 0.001\nwarmup_steps = 4\nwarmup_start_density = 0.1\n[train]\nsteps = 10\nlr = 1.0\nwarmup_steps = 2\nmin_lr_fraction = 0.1",
    )
    .unwrap();
    assert!((cfg.density_at(0) - 0.1).abs() < 1e-12);
    assert!((cfg.density_at(2) - 0.01).abs() < 1e-12);
    assert_eq!(cfg.density_at(4), 0.001);
    assert_eq!(cfg.density_at(100), 0.001);
    assert_eq!(cfg.lr_at(0), 0.5);
    assert_eq!(cfg.lr_at(1), 1.0);
    assert!((cfg.lr_at(10) - 0.1).abs() < 1e-12);
}
