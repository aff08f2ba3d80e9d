//! metrics.jsonl as a resume finds it after a crash, a full disk or a hand edit: random and mutated
//! text parses to records or to an error naming the line, never a panic.
//!
//! Case counts (20 000 in all, about a second): random lines 10 000, mutated valid files 10 000.
use harness::{metrics::parse_records, Metrics, Record};
use proptest::prelude::*;
use std::path::Path;

fn cases(n: u32) -> ProptestConfig {
    ProptestConfig {
        cases: n,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn valid_file() -> String {
    (1..=4u64)
        .map(|step| {
            let mut m = Metrics::new();
            m.insert("loss".into(), 1.0 / step as f64);
            m.insert("fvu".into(), f64::NAN);
            Record::train(step, step * 64, step as f64 * 0.1, m).to_json_line()
        })
        .collect()
}

proptest! {
    #![proptest_config(cases(10_000))]
    #[test]
    fn random_lines_never_panic(lines in proptest::collection::vec(".{0,80}", 0..6)) {
        let text = lines.join("\n");
        let _ = parse_records(&text, Path::new("metrics.jsonl"));
    }
}

proptest! {
    #![proptest_config(cases(10_000))]
    #[test]
    fn mutated_files_parse_or_name_the_line(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bytes = valid_file().into_bytes();
        for (at, b) in &edits {
            let i = at.index(bytes.len());
            bytes[i] = *b;
        }
        bytes.truncate(cut.index(bytes.len() + 1));
        let text = String::from_utf8_lossy(&bytes);
        match parse_records(&text, Path::new("metrics.jsonl")) {
            Ok(records) => prop_assert!(records.len() <= 4),
            Err(e) => prop_assert!(e.to_string().starts_with("metrics.jsonl:")),
        }
    }
}

#[test]
fn a_torn_last_line_is_skipped() {
    let text = valid_file();
    let torn = &text[..text.len() - 10];
    assert_eq!(parse_records(torn, Path::new("m")).unwrap().len(), 3);
    assert_eq!(parse_records(&text, Path::new("m")).unwrap().len(), 4);
}
