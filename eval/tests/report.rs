mod common;

use common::synthetic_run;
use eval::report::{render, write_report, RunData};

#[test]
fn two_runs_give_a_page_with_charts_tables_and_the_speed_up() {
    let tmp = tempfile::tempdir().unwrap();
    let profk = synthetic_run(tmp.path(), "tiny", "profk", 0.5, 200);
    let sort = synthetic_run(tmp.path(), "tiny", "sort", 5.0, 200);
    let out = tmp.path().join("report.html");
    write_report(&[profk, sort], &out).unwrap();
    let html = std::fs::read_to_string(&out).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.trim_end().ends_with("</html>"));
    assert!(
        html.matches("<svg").count() >= 6,
        "timing, speed-up and metric charts"
    );
    assert_eq!(html.matches("<svg").count(), html.matches("</svg>").count());
    for text in [
        "Step time",
        "Selection time",
        "Speed-up of profk",
        "median step ms",
        "only_in_profk",
        "ce_loss_recovered",
        "fvu",
        "l0",
    ] {
        assert!(html.contains(text), "missing {text}");
    }
    // sort's select time is 10x profk's: the speed-up table says so.
    assert!(html.contains("10.00×"), "selection speed-up");
    assert!(!html.contains("<script"), "self-contained, no scripts");
    assert!(!html.contains("src=\"http"), "no external assets");
}

#[test]
fn a_single_run_without_timing_metrics_still_renders() {
    let tmp = tempfile::tempdir().unwrap();
    let run = harness::RunDir::create_at(&tmp.path().join("bare")).unwrap();
    let mut m = harness::Metrics::new();
    m.insert("loss".into(), 2.0);
    std::fs::write(
        run.metrics_path(),
        harness::Record::train(1, 10, 0.1, m).to_json_line(),
    )
    .unwrap();
    let html = render(&[RunData::load(&run).unwrap()]).unwrap();
    assert!(html.contains("No step_ms or select_ms metrics"));
    assert!(html.contains("loss"));
    assert!(!html.contains("Speed-up of profk"));
}

/// The page of one synthetic run.
fn single_run_page(label: &str, selector: &str, select_ms: f64, steps: u64) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let run = synthetic_run(tmp.path(), label, selector, select_ms, steps);
    render(&[RunData::load(&run).unwrap()]).unwrap()
}

#[test]
fn labels_are_escaped() {
    let html = single_run_page("a<b>&c", "profk", 0.5, 5);
    assert!(html.contains("a&lt;b&gt;&amp;c"));
    assert!(!html.contains("a<b>&c"));
}

#[test]
fn a_single_run_with_timing_gets_its_charts() {
    let html = single_run_page("tiny", "sort", 2.0, 1);
    assert!(html.contains("Median step time, selection inside it"));
    assert!(html.contains("Step time"));
    assert!(
        !html.contains("Speed-up of profk"),
        "nothing to compare with"
    );
}

/// Replaces a run's config.json by `edit` applied to it.
fn edit_config(run: &harness::RunDir, edit: impl FnOnce(&mut serde_json::Value)) {
    let mut config = run.read_config_json().unwrap().unwrap();
    edit(&mut config);
    run.write_config("", &config).unwrap();
}

/// Replaces a run's run.json by `edit` applied to it.
fn edit_meta(run: &harness::RunDir, edit: impl FnOnce(&mut harness::RunMeta)) {
    let mut meta = run.read_meta().unwrap();
    edit(&mut meta);
    run.write_meta(&meta).unwrap();
}

fn page(runs: &[&harness::RunDir], forced: &[(usize, usize)]) -> String {
    let data: Vec<RunData> = runs.iter().map(|r| RunData::load(r).unwrap()).collect();
    eval::report::render_paired(&data, forced).unwrap()
}

fn pairs_of(
    runs: &[&harness::RunDir],
    forced: &[(usize, usize)],
) -> Vec<eval::report::pairing::Pairing> {
    let data: Vec<RunData> = runs.iter().map(|r| RunData::load(r).unwrap()).collect();
    eval::report::pairing::pairings(&data, forced)
}

#[test]
fn runs_whose_configs_differ_only_in_the_selector_are_paired() {
    let tmp = tempfile::tempdir().unwrap();
    let profk = synthetic_run(tmp.path(), "tiny", "profk", 0.5, 50);
    let sort = synthetic_run(tmp.path(), "tiny", "sort", 5.0, 50);
    edit_config(&sort, |c| c["selector"]["compare"] = true.into());
    let pairs = pairs_of(&[&profk, &sort], &[]);
    assert_eq!(pairs.len(), 1, "{pairs:?}");
    let p = &pairs[0];
    assert_eq!((p.run, p.baseline, p.forced), (0, 1, false));
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    let html = page(&[&profk, &sort], &[]);
    assert!(
        html.contains("<span class=\"good\">10.00×</span>"),
        "a trusted speed-up is green"
    );
    assert!(!html.contains("Read before comparing"));
}

#[test]
fn a_density_difference_does_not_pair_and_the_page_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let profk = synthetic_run(tmp.path(), "tiny", "profk", 0.5, 50);
    let sort = synthetic_run(tmp.path(), "tiny", "sort", 5.0, 50);
    edit_config(&profk, |c| {
        c["sparsify"] = serde_json::json!({"density": 0.25})
    });
    edit_config(&sort, |c| {
        c["sparsify"] = serde_json::json!({"density": 1.0})
    });
    assert!(pairs_of(&[&profk, &sort], &[]).is_empty());
    let html = page(&[&profk, &sort], &[]);
    assert!(
        !html.contains("Speed-up of profk"),
        "no speed-up across configs"
    );
    assert!(!html.contains("10.00×"));
    assert!(
        html.contains("sparsify.density (0.25 vs 1.0)") && html.contains("--pair"),
        "names the difference and the way to pair anyway"
    );
}

#[test]
fn a_forced_pairing_lists_every_differing_key() {
    let tmp = tempfile::tempdir().unwrap();
    let profk = synthetic_run(tmp.path(), "tiny", "profk", 0.5, 50);
    let sort = synthetic_run(tmp.path(), "small", "sort", 5.0, 50);
    edit_config(&sort, |c| {
        c["sae"]["k"] = 64.into();
        c["train"]["batch_size"] = 1024.into();
    });
    let pairs = pairs_of(&[&profk, &sort], &[(0, 1)]);
    assert_eq!(pairs.len(), 1);
    let keys: Vec<&str> = pairs[0]
        .differences
        .iter()
        .map(|d| d.key.as_str())
        .collect();
    assert_eq!(keys, ["name", "sae.k", "selector.kind", "train.batch_size"]);
    let html = page(&[&profk, &sort], &[(0, 1)]);
    for text in [
        "Speed-up of profk",
        "sae.k = 32 vs 64",
        "train.batch_size = 4096 vs 1024",
        "selector.kind = profk vs sort",
        "paired by --pair though the configs differ in name, sae.k, selector.kind, train.batch_size",
    ] {
        assert!(html.contains(text), "missing {text}");
    }
    assert!(
        !html.contains("<span class=\"good\">"),
        "a forced pairing's speed-up is not shown as a result"
    );
    assert!(html.contains("10.00× ⚠"));
}

#[test]
fn runs_under_other_conditions_are_warned_of() {
    let tmp = tempfile::tempdir().unwrap();
    let profk = synthetic_run(tmp.path(), "tiny", "profk", 0.5, 50);
    let sort = synthetic_run(tmp.path(), "tiny", "sort", 5.0, 50);
    edit_meta(&sort, |m| {
        let p = m.provenance.as_mut().unwrap();
        p.host = "node-2".into();
        p.gpus = vec!["NVIDIA H200".into()];
        p.build.dirty = true;
        p.model_sha256 = Some("sha256:beef".into());
    });
    let pairs = pairs_of(&[&profk, &sort], &[]);
    assert_eq!(pairs.len(), 1, "the configs still pair");
    let facts: Vec<&str> = pairs[0]
        .warnings
        .iter()
        .map(|w| w.split(' ').next().unwrap())
        .collect();
    assert_eq!(facts, ["host", "gpus", "commit", "model"]);
    let html = page(&[&profk, &sort], &[]);
    assert!(html.contains("Read before comparing"));
    assert!(html.contains("host differs: node-1 (tiny-profk) vs node-2 (tiny-sort)"));
    assert!(html.contains("0123456789ab+dirty"));
    assert!(html.contains("10.00× ⚠") && !html.contains("<span class=\"good\">"));
    assert!(
        html.contains("class=\"l differs\""),
        "the provenance table marks the cells"
    );

    // A run recorded before provenance was: the conditions cannot be checked.
    edit_meta(&sort, |m| m.provenance = None);
    let html = page(&[&profk, &sort], &[]);
    assert!(html.contains("tiny-sort recorded no host, GPU, commit or model hash"));
}

#[test]
fn every_run_has_its_own_colour_and_label() {
    let tmp = tempfile::tempdir().unwrap();
    let a = synthetic_run(&tmp.path().join("a"), "tiny", "profk", 0.5, 20);
    let b = synthetic_run(&tmp.path().join("b"), "tiny", "profk", 0.6, 20);
    let data: Vec<RunData> = [&a, &b].iter().map(|r| RunData::load(r).unwrap()).collect();
    let labels = eval::report::labels(&data);
    assert_ne!(labels[0], labels[1]);
    let html = page(&[&a, &b], &[]);
    let swatches: std::collections::BTreeSet<&str> = html
        .match_indices("class=\"swatch\" style=\"background:#")
        .map(|(i, m)| &html[i + m.len()..i + m.len() + 6])
        .collect();
    assert!(
        swatches.len() >= 2,
        "two profk runs, two colours: {swatches:?}"
    );
}

#[test]
fn a_single_run_shows_the_speed_up_of_its_own_checks() {
    let tmp = tempfile::tempdir().unwrap();
    let run = harness::RunDir::create_at(&tmp.path().join("checked")).unwrap();
    run.write_config(
        "",
        &serde_json::json!({"selector": {"kind": "profk", "compare_with": "sort"}}),
    )
    .unwrap();
    let lines: String = (1..=40u64)
        .map(|step| {
            let mut m = harness::Metrics::new();
            m.insert("step_ms".into(), 10.0);
            m.insert("select_ms".into(), 0.5);
            if step % 10 == 0 {
                m.insert("compare_select_ms".into(), 1.5);
            }
            harness::Record::train(step, step * 100, 0.1, m).to_json_line()
        })
        .collect();
    std::fs::write(run.metrics_path(), lines).unwrap();
    let data = RunData::load(&run).unwrap();
    let check = eval::report::summary::in_run_check(&data).unwrap();
    assert_eq!((check.records, check.speed_up), (4, Some(3.0)));
    assert_eq!(check.compared_with, "sort");
    let html = render(&[data]).unwrap();
    assert!(html.contains("Speed-up measured in-run"));
    assert!(html.contains("<span class=\"good\">3.00×</span>"));
}

/// A fine-tune run: train loss and eval records with its unigram baselines.
fn finetune_run(root: &std::path::Path, name: &str, mode: &str, step_ms: f64) -> harness::RunDir {
    let run = harness::RunDir::create_at(&root.join(name)).unwrap();
    run.write_meta(&harness::RunMeta {
        task: "finetune".into(),
        selector: "profk".into(),
        provenance: Some(common::provenance()),
        ..harness::RunMeta::default()
    })
    .unwrap();
    let density = if mode == "dense" { 1.0 } else { 0.01 };
    run.write_config(
        "",
        &serde_json::json!({"name": "tiny-finetune", "selector": {"kind": "profk"},
                            "sparsify": {"mode": mode, "density": density}, "train": {"steps": 20}}),
    )
    .unwrap();
    let mut lines = String::new();
    for step in 1..=20u64 {
        let mut m = harness::Metrics::new();
        m.insert("step_ms".into(), step_ms);
        m.insert("loss".into(), 8.0 - 0.1 * step as f64);
        if mode != "dense" {
            m.insert("ef_residual_norm".into(), 1.0 + step as f64);
            m.insert("ef_kept_share".into(), 0.3);
        }
        lines.push_str(&harness::Record::train(step, step * 64, 0.1, m).to_json_line());
        if step % 10 == 0 {
            let mut e = harness::Metrics::new();
            e.insert("eval_loss".into(), 7.5 - 0.05 * step as f64);
            e.insert("unigram_entropy".into(), 6.1);
            e.insert("unigram_eval_loss".into(), 6.37095044);
            lines.push_str(&harness::Record::eval(step, step * 64, 0.1, e).to_json_line());
        }
    }
    std::fs::write(run.metrics_path(), lines).unwrap();
    run
}

#[test]
fn a_fine_tune_is_set_beside_its_dense_baseline_with_reference_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let sparse = finetune_run(tmp.path(), "ft-topk", "topk", 20.0);
    let dense = finetune_run(tmp.path(), "ft-dense", "dense", 30.0);
    let pairs = pairs_of(&[&sparse, &dense], &[]);
    assert_eq!(pairs.len(), 1, "{pairs:?}");
    assert_eq!(
        pairs[0].kind,
        eval::report::pairing::PairKind::DenseBaseline
    );
    assert_eq!((pairs[0].run, pairs[0].baseline), (0, 1));
    let html = page(&[&sparse, &dense], &[]);
    assert!(html.contains("Against the dense baseline"));
    assert!(
        html.contains("<span class=\"good\">1.50×</span>"),
        "dense 30 ms / sparse 20 ms"
    );
    assert!(
        !html.contains("Speed-up of profk"),
        "a dense run is not a selector"
    );
    for title in ["Error-feedback residual", "Gradient mass kept by the top-k"] {
        assert!(html.contains(title), "missing {title}");
    }
    assert!(
        !html.contains("eval unigram_eval_loss") && !html.contains("eval unigram_entropy"),
        "no flat charts of the baselines"
    );
    assert!(
        html.contains("unigram_eval_loss of ft-topk"),
        "a reference line's legend"
    );
    assert!(!html.contains("6.37095044<"), "no axis of float noise");
}

#[test]
fn a_run_without_held_out_data_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let run = synthetic_run(tmp.path(), "shards", "profk", 0.5, 10);
    let mut text = std::fs::read_to_string(run.metrics_path()).unwrap();
    let mut e = harness::Metrics::new();
    e.insert("heldout_tokens".into(), 0.0);
    text.push_str(&harness::Record::eval(10, 40960, 0.1, e).to_json_line());
    std::fs::write(run.metrics_path(), text).unwrap();
    let data = RunData::load(&run).unwrap();
    let html = render(std::slice::from_ref(&data)).unwrap();
    assert!(html.contains("no held-out evaluation (heldout_tokens 0)"));
    assert!(html.contains("data.held_out_dir"));
    let text = eval::report::summary_text(&[data], &[]);
    assert!(text.contains("warning: no held-out evaluation"), "{text}");
}

/// Data-parallel runs log what each rank sent: the page charts it per run in a section of its own.
#[test]
fn data_parallel_runs_get_their_wire_charts() {
    let tmp = tempfile::tempdir().unwrap();
    let run = finetune_run(tmp.path(), "ft-sparse", "topk", 20.0);
    let mut lines = std::fs::read_to_string(run.metrics_path()).unwrap();
    for step in 21..=25u64 {
        let mut m = harness::Metrics::new();
        m.insert("loss".into(), 6.0);
        m.insert("wire_bytes".into(), 1.2e7 + step as f64);
        m.insert("wire_dense_bytes".into(), 6.2e9);
        m.insert("wire_ratio".into(), 500.0);
        m.insert("collective_ms".into(), 0.3);
        m.insert("weights_hash".into(), 123456789.0);
        lines.push_str(&harness::Record::train(step, step * 64, 0.1, m).to_json_line());
    }
    std::fs::write(run.metrics_path(), lines).unwrap();
    let html = page(&[&run], &[]);
    assert!(html.contains("<h2>Wire</h2>"), "no wire section");
    for title in [
        "Bytes sent per step",
        "Wire compression",
        "Time in collectives",
    ] {
        assert!(html.contains(title), "missing {title}");
    }
    let plain = finetune_run(tmp.path(), "ft-plain", "topk", 20.0);
    assert!(!page(&[&plain], &[]).contains("<h2>Wire</h2>"));
}
