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
    let run = eval::RunDir::create_at(&tmp.path().join("bare")).unwrap();
    let mut m = eval::Metrics::new();
    m.insert("loss".into(), 2.0);
    std::fs::write(
        run.metrics_path(),
        eval::Record::train(1, 10, 0.1, m).to_json_line(),
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
