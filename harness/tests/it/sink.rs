use crate::common;

use harness::{
    metrics::read_records, Metrics, MetricsSink, Record, RecordKind, RunDir, SinkOptions,
};

fn record(step: u64) -> Record {
    let mut m = Metrics::new();
    m.insert("loss".into(), 1.0 / step as f64);
    m.insert("bad".into(), f64::NAN);
    Record::train(step, step * 10, step as f64, m)
}

/// A fresh sink on `run` logs train records of `steps`, then `more`, and is dropped right after.
fn log_and_drop(run: &RunDir, steps: std::ops::RangeInclusive<u64>, more: &[Record]) {
    let sink = MetricsSink::create(run, SinkOptions::default()).unwrap();
    for step in steps {
        sink.log(record(step));
    }
    for r in more {
        sink.log(r.clone());
    }
}

#[test]
fn every_record_is_written_even_when_dropped_right_after_logging() {
    let (_tmp, run) = common::temp_run("t");
    log_and_drop(&run, 1..=10_000, &[]);
    let records = read_records(&run.metrics_path()).unwrap();
    assert_eq!(records.len(), 10_000);
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r.step, i as u64 + 1, "records keep their logging order");
        assert_eq!(r.kind, RecordKind::Train);
        assert_eq!(r.metrics["loss"], 1.0 / r.step as f64);
        assert!(r.metrics["bad"].is_nan(), "NaN survives the round trip");
    }
}

#[test]
fn flush_makes_records_visible_while_the_sink_lives() {
    let (_tmp, run) = common::temp_run("t");
    let sink = MetricsSink::create(&run, SinkOptions::default()).unwrap();
    sink.log(record(1));
    sink.log(record(2));
    sink.flush().unwrap();
    assert_eq!(read_records(&run.metrics_path()).unwrap().len(), 2);
    sink.log(record(3));
    sink.finish().unwrap();
    assert_eq!(read_records(&run.metrics_path()).unwrap().len(), 3);
}

#[test]
fn resume_drops_records_past_the_checkpoint_and_a_torn_line() {
    let (_tmp, run) = common::temp_run("t");
    log_and_drop(&run, 1..=8, &[Record::eval(5, 50, 5.0, Metrics::new())]);
    // A run killed mid-write leaves half a line.
    let mut text = std::fs::read_to_string(run.metrics_path()).unwrap();
    text.push_str("{\"step\":9,\"tok");
    std::fs::write(run.metrics_path(), text).unwrap();

    let sink = MetricsSink::resume(&run, 5, SinkOptions::default()).unwrap();
    for step in 6..=7 {
        sink.log(record(step));
    }
    sink.finish().unwrap();
    let steps: Vec<(u64, RecordKind)> = read_records(&run.metrics_path())
        .unwrap()
        .iter()
        .map(|r| (r.step, r.kind))
        .collect();
    let mut expected: Vec<(u64, RecordKind)> = (1..=5).map(|s| (s, RecordKind::Train)).collect();
    expected.push((5, RecordKind::Eval));
    expected.extend((6..=7).map(|s| (s, RecordKind::Train)));
    assert_eq!(steps, expected);
}

#[test]
fn a_malformed_line_in_the_middle_is_an_error_naming_the_line() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("metrics.jsonl");
    let good = record(1).to_json_line();
    std::fs::write(&path, format!("{good}not json\n{good}")).unwrap();
    let err = read_records(&path).unwrap_err().to_string();
    assert!(err.contains("metrics.jsonl:2"), "{err}");
}

#[test]
fn run_dir_refuses_to_overwrite_a_run_and_opens_it_for_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out");
    let run = RunDir::create_at(&dir).unwrap();
    run.write_meta(&harness::RunMeta::default()).unwrap();
    let err = RunDir::create_at(&dir).unwrap_err().to_string();
    assert!(err.contains("--resume"), "{err}");
    assert_eq!(RunDir::open_existing(&dir).unwrap(), run);
    assert_eq!(run.read_meta().unwrap().name, "out");
    let missing = RunDir::open_existing(&tmp.path().join("nope")).unwrap_err();
    assert!(missing.to_string().contains("no such run directory"));
}

#[test]
fn created_run_dirs_are_unique() {
    let tmp = tempfile::tempdir().unwrap();
    let a = RunDir::create(tmp.path(), "tiny-profk").unwrap();
    let b = RunDir::create(tmp.path(), "tiny-profk").unwrap();
    assert_ne!(a.path(), b.path());
    assert!(a.name().starts_with("tiny-profk-"));
    assert!(a.checkpoints_dir().is_dir());
}
