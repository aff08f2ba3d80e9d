//! Parquet, compressed JSONL and hub-cache corpora: read in order, in the right column, split
//! reproducibly, packed exactly as the in-memory path packs text, with errors that say where.
use activations::corpus::{Contexts, CorpusSource, CorpusSpec, PackOptions, Split};
use activations::tokenizer::END_OF_TEXT;
use activations::Gpt2Tokenizer;
use arrow_array::types::Int32Type;
use arrow_array::{ArrayRef, Int64Array, ListArray, RecordBatch, StringArray};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

fn write_parquet(path: &Path, columns: Vec<(&str, ArrayRef)>, rows_per_group: usize) {
    let batch = RecordBatch::try_from_iter(columns).unwrap();
    let props = WriterProperties::builder()
        .set_max_row_group_size(rows_per_group)
        .set_compression(Compression::SNAPPY)
        .build();
    let file = std::fs::File::create(path).unwrap();
    let mut w = ArrowWriter::try_new(file, batch.schema(), Some(props)).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

fn texts(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            format!(
                "Document {i}: the quality of mercy is not strained, {}.",
                i * 7
            )
        })
        .collect()
}

fn text_column(t: &[String]) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(t))
}

fn opts(split: Split, context_len: usize) -> PackOptions {
    PackOptions {
        split,
        heldout_fraction: 0.2,
        context_len,
        prepend_bos: true,
        tokenizer: Gpt2Tokenizer::new().unwrap(),
    }
}

/// The reference: every text tokenized, followed by `<|endoftext|>`, packed by `Contexts::pack`.
fn packed(texts: &[String], context_len: usize) -> Vec<u32> {
    let tok = Gpt2Tokenizer::new().unwrap();
    let mut stream = Vec::new();
    for t in texts {
        stream.extend(tok.encode(t).unwrap());
        stream.push(END_OF_TEXT);
    }
    Contexts::pack(&stream, context_len, true, END_OF_TEXT)
        .unwrap()
        .tokens
}

fn all_contexts(spec: &CorpusSpec, o: PackOptions) -> Vec<u32> {
    CorpusSource::open(spec)
        .unwrap()
        .contexts(o, None)
        .unwrap()
        .tokens
}

#[test]
fn parquet_text_column_over_row_groups_and_files_packs_like_memory() {
    let dir = tempfile::tempdir().unwrap();
    let t = texts(120);
    std::fs::create_dir(dir.path().join("b")).unwrap();
    write_parquet(
        &dir.path().join("a.parquet"),
        vec![("text", text_column(&t[..70]))],
        16,
    );
    write_parquet(
        &dir.path().join("b/c.parquet"),
        vec![("text", text_column(&t[70..]))],
        7,
    );
    let spec = CorpusSpec::new(dir.path().to_str().unwrap());
    let source = CorpusSource::open(&spec).unwrap();
    assert!(source.is_streamed());
    assert_eq!(all_contexts(&spec, opts(Split::All, 32)), packed(&t, 32));
    let one = CorpusSpec::new(dir.path().join("a.parquet").to_str().unwrap());
    assert_eq!(
        all_contexts(&one, opts(Split::All, 32)),
        packed(&t[..70], 32)
    );
    // A bounded read stops after the contexts asked for.
    let first = source.contexts(opts(Split::All, 32), Some(3)).unwrap();
    assert_eq!(first.tokens, packed(&t, 32)[..3 * 32]);
}

#[test]
fn custom_text_column_and_errors_that_name_file_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("train.parquet");
    let t = texts(10);
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(0..10));
    write_parquet(&path, vec![("content", text_column(&t)), ("id", ids)], 4);
    let name = path.to_str().unwrap();
    let spec = CorpusSpec {
        corpus: name.into(),
        text_column: Some("content".into()),
        token_column: None,
    };
    assert_eq!(all_contexts(&spec, opts(Split::All, 16)), packed(&t, 16));

    let err = |spec: CorpusSpec| {
        CorpusSource::open(&spec)
            .and_then(|s| s.contexts(opts(Split::All, 16), None))
            .unwrap_err()
            .to_string()
    };
    let e = err(CorpusSpec::new(name));
    assert!(
        e.contains("train.parquet") && e.contains("column `text`") && e.contains("content, id"),
        "{e}"
    );
    let e = err(CorpusSpec {
        text_column: Some("id".into()),
        ..CorpusSpec::new(name)
    });
    assert!(e.contains("column `id`") && e.contains("Int64"), "{e}");
    let e = err(CorpusSpec {
        token_column: Some("content".into()),
        ..CorpusSpec::new(name)
    });
    assert!(
        e.contains("column `content`") && e.contains("token ids"),
        "{e}"
    );

    let bad = dir.path().join("broken.parquet");
    std::fs::write(&bad, b"not a parquet file at all").unwrap();
    let e = err(CorpusSpec::new(bad.to_str().unwrap()));
    assert!(
        e.contains("broken.parquet") && e.contains("unreadable parquet"),
        "{e}"
    );
}

#[test]
fn pretokenized_rows_are_used_as_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens.parquet");
    // Two rows of exactly one context each, then two short rows that are packed as a stream.
    let rows = vec![
        Some((0..8).map(Some).collect::<Vec<_>>()),
        Some((100..108).map(Some).collect()),
        Some(vec![Some(7), Some(8), Some(9), Some(10)]),
        None,
        Some(vec![Some(11), Some(12), Some(13), Some(14), Some(15)]),
    ];
    let column: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(rows));
    write_parquet(&path, vec![("input_ids", column)], 2);
    let spec = CorpusSpec {
        token_column: Some("input_ids".into()),
        ..CorpusSpec::new(path.to_str().unwrap())
    };
    let got = all_contexts(&spec, opts(Split::All, 8));
    let mut want: Vec<u32> = (0..8).chain(100..108).collect();
    want.extend([END_OF_TEXT, 7, 8, 9, 10, 11, 12, 13]);
    assert_eq!(got, want);

    let bad = dir.path().join("bad.parquet");
    let column: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
        Some(vec![Some(1), Some(60000)]),
    ]));
    write_parquet(&bad, vec![("input_ids", column)], 2);
    let e = CorpusSource::open(&CorpusSpec {
        corpus: bad.to_str().unwrap().into(),
        ..spec
    })
    .unwrap()
    .contexts(opts(Split::All, 8), None)
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("bad.parquet") && e.contains("input_ids") && e.contains("60000"),
        "{e}"
    );
}

/// A hub cache with `datasets--owner--name`, its `refs/main` and one snapshot.
fn fake_hub(root: &Path, t: &[String]) -> std::path::PathBuf {
    let repo = root.join("datasets--owner--name");
    let hash = "0123456789abcdef0123456789abcdef01234567";
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), hash).unwrap();
    let data = repo.join("snapshots").join(hash).join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(
        repo.join("snapshots").join(hash).join("README.md"),
        "# card",
    )
    .unwrap();
    write_parquet(
        &data.join("train-00000-of-00002.parquet"),
        vec![("text", text_column(&t[..5]))],
        3,
    );
    write_parquet(
        &data.join("train-00001-of-00002.parquet"),
        vec![("text", text_column(&t[5..]))],
        3,
    );
    repo
}

#[test]
fn hub_datasets_resolve_offline_in_the_cache() {
    let hub = tempfile::tempdir().unwrap();
    let t = texts(12);
    let repo = fake_hub(hub.path(), &t);
    let roots = vec![hub.path().join("elsewhere"), hub.path().to_path_buf()];
    let contexts = |spec: &str| {
        CorpusSource::open_with_hub(&CorpusSpec::new(spec), &roots)
            .and_then(|s| s.contexts(opts(Split::All, 16), None))
            .map(|c| c.tokens)
    };
    assert_eq!(contexts("hf:owner/name").unwrap(), packed(&t, 16));
    assert_eq!(contexts("hf:owner/name/data@main").unwrap(), packed(&t, 16));
    let by_hash = "hf:owner/name@0123456789abcdef0123456789abcdef01234567";
    assert_eq!(contexts(by_hash).unwrap(), packed(&t, 16));

    let e = contexts("hf:owner/name@v2").unwrap_err().to_string();
    assert!(
        e.contains("hf:owner/name@v2") && e.contains("datasets--owner--name/refs/v2"),
        "{e}"
    );
    let e = contexts("hf:owner/name/nothing").unwrap_err().to_string();
    assert!(e.contains("nothing") && e.contains("no such folder"), "{e}");
    let e = contexts("hf:other/name").unwrap_err().to_string();
    assert!(e.contains("datasets--other--name/refs/main"), "{e}");

    for f in std::fs::read_dir(repo.join("snapshots/0123456789abcdef0123456789abcdef01234567/data"))
        .unwrap()
    {
        std::fs::remove_file(f.unwrap().path()).unwrap();
    }
    let e = contexts("hf:owner/name").unwrap_err().to_string();
    assert!(
        e.contains("hf:owner/name@main") && e.contains("no parquet files"),
        "{e}"
    );
}

/// The cache roots come from HF_HUB_CACHE: checked in a child process, so no test shares the
/// variable with another thread.
#[test]
fn hub_cache_root_comes_from_hf_hub_cache() {
    if let Ok(root) = std::env::var("SPARSETRAIN_TEST_HUB_CHILD") {
        let source = CorpusSource::open(&CorpusSpec::new("hf:owner/name")).unwrap();
        let got = source.contexts(opts(Split::All, 16), None).unwrap().tokens;
        assert_eq!(got, packed(&texts(12), 16), "{root}");
        return;
    }
    let hub = tempfile::tempdir().unwrap();
    fake_hub(hub.path(), &texts(12));
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "corpus_datasets::hub_cache_root_comes_from_hf_hub_cache",
            "--nocapture",
        ])
        .env("SPARSETRAIN_TEST_HUB_CHILD", hub.path())
        .env("HF_HUB_CACHE", hub.path())
        .env_remove("HF_HOME")
        .output()
        .unwrap();
    let log =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && log.contains("1 passed"), "{log}");
}

#[test]
fn heldout_split_is_disjoint_reproducible_and_thread_independent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rows.parquet");
    // Row i is one context of token i: a context says which document it came from.
    let n = 400;
    let rows = (0..n).map(|i| Some(vec![Some(i); 4]));
    let column: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(rows));
    write_parquet(&path, vec![("input_ids", column)], 64);
    let spec = CorpusSpec {
        token_column: Some("input_ids".into()),
        ..CorpusSpec::new(path.to_str().unwrap())
    };
    let docs = |split| -> Vec<u32> {
        all_contexts(&spec, opts(split, 4))
            .chunks(4)
            .map(|c| c[0])
            .collect()
    };
    let (train, held) = (docs(Split::Train), docs(Split::Heldout));
    assert_eq!(train.len() + held.len(), n as usize);
    assert!(held.iter().all(|d| !train.contains(d)));
    assert!((50..110).contains(&held.len()), "{} held out", held.len());
    assert_eq!(held, docs(Split::Heldout));

    let text_dir = tempfile::tempdir().unwrap();
    let t = texts(300);
    write_parquet(
        &text_dir.path().join("t.parquet"),
        vec![("text", text_column(&t))],
        50,
    );
    let spec = CorpusSpec::new(text_dir.path().to_str().unwrap());
    let with_threads = |threads| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| all_contexts(&spec, opts(Split::Heldout, 16)))
    };
    let one = with_threads(1);
    assert!(!one.is_empty());
    assert_eq!(one, with_threads(4));
}

#[test]
fn compressed_jsonl_reads_like_plain_jsonl() {
    let dir = tempfile::tempdir().unwrap();
    let t = texts(40);
    let jsonl: String = t
        .iter()
        .map(|s| serde_json::json!({ "text": s, "n": 1 }).to_string() + "\n")
        .collect();
    std::fs::write(dir.path().join("plain.jsonl"), &jsonl).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(jsonl.as_bytes()).unwrap();
    std::fs::write(dir.path().join("c.jsonl.gz"), gz.finish().unwrap()).unwrap();
    let zst = zstd::encode_all(jsonl.as_bytes(), 3).unwrap();
    std::fs::write(dir.path().join("c.jsonl.zst"), zst).unwrap();

    let plain = CorpusSpec::new(dir.path().join("plain.jsonl").to_str().unwrap());
    assert!(!CorpusSource::open(&plain).unwrap().is_streamed());
    let want = packed(&t, 16);
    assert_eq!(all_contexts(&plain, opts(Split::All, 16)), want);
    for name in ["c.jsonl.gz", "c.jsonl.zst"] {
        let spec = CorpusSpec::new(dir.path().join(name).to_str().unwrap());
        assert_eq!(all_contexts(&spec, opts(Split::All, 16)), want, "{name}");
    }
    std::fs::write(dir.path().join("bad.jsonl.zst"), b"garbage").unwrap();
    let spec = CorpusSpec::new(dir.path().join("bad.jsonl.zst").to_str().unwrap());
    let e = CorpusSource::open(&spec)
        .and_then(|s| s.contexts(opts(Split::All, 16), None))
        .unwrap_err()
        .to_string();
    assert!(e.contains("bad.jsonl.zst"), "{e}");
}

#[test]
fn streams_repeat_and_in_memory_streams_match_contexts() {
    let dir = tempfile::tempdir().unwrap();
    let t = texts(30);
    write_parquet(
        &dir.path().join("a.parquet"),
        vec![("text", text_column(&t))],
        8,
    );
    let source = CorpusSource::open(&CorpusSpec::new(dir.path().to_str().unwrap())).unwrap();
    let all = packed(&t, 16);
    let n = all.len() / 16;
    let mut s = source.stream(opts(Split::All, 16), true).unwrap();
    assert_eq!(s.context_len(), 16);
    let mut got = Vec::new();
    for _ in 0..3 {
        got.extend(s.next_contexts(n - 1).unwrap().unwrap());
    }
    let twice: Vec<u32> = all.iter().chain(&all).chain(&all).copied().collect();
    assert_eq!(got, twice[..3 * (n - 1) * 16]);

    let mut once = source.stream(opts(Split::All, 16), false).unwrap();
    assert_eq!(once.next_contexts(n + 5).unwrap().unwrap(), all);
    assert!(once.next_contexts(1).unwrap().is_none());

    let memory = CorpusSource::open(&CorpusSpec::new("default")).unwrap();
    let c = memory.contexts(opts(Split::Heldout, 64), None).unwrap();
    let mut m = memory.stream(opts(Split::Heldout, 64), false).unwrap();
    let mut streamed = Vec::new();
    while let Some(b) = m.next_contexts(100).unwrap() {
        streamed.extend(b);
    }
    assert_eq!(streamed, c.tokens);
}

/// Rows of token ids 0..n, n+1.. (short rows, packed as a stream), as a parquet list column.
fn id_rows(rows: usize, len: i32) -> ArrayRef {
    let rows = (0..rows as i32).map(|r| Some((0..len).map(move |i| Some(r * len + i))));
    Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(rows))
}

#[test]
fn token_columns_are_read_without_a_key_when_there_is_no_text_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pre.parquet");
    write_parquet(
        &path,
        vec![
            ("attention_mask", id_rows(30, 5)),
            ("input_ids", id_rows(30, 5)),
        ],
        8,
    );
    let name = path.to_str().unwrap();
    let source = CorpusSource::open(&CorpusSpec::new(name)).unwrap();
    assert_eq!(source.detected_token_column(), Some("input_ids"));
    assert_eq!(
        source.detection_note().unwrap(),
        format!("corpus {name}: no \"text\" column; reading token ids from \"input_ids\"")
    );
    let named = CorpusSpec {
        token_column: Some("input_ids".into()),
        ..CorpusSpec::new(name)
    };
    let got = all_contexts(&CorpusSpec::new(name), opts(Split::All, 8));
    assert!(!got.is_empty());
    assert_eq!(got, all_contexts(&named, opts(Split::All, 8)));
    assert_eq!(
        CorpusSource::open(&named).unwrap().detected_token_column(),
        None,
        "a named column is not a detected one"
    );

    // JSONL in any compression, with `tokens`; `input_ids` comes first when both are there.
    let lines: String = (0..30)
        .map(|r| {
            serde_json::json!({ "tokens": (r * 5..r * 5 + 5).collect::<Vec<i32>>() }).to_string()
                + "\n"
        })
        .collect();
    let zst = dir.path().join("pre.jsonl.zst");
    std::fs::write(&zst, zstd::encode_all(lines.as_bytes(), 3).unwrap()).unwrap();
    let spec = CorpusSpec::new(zst.to_str().unwrap());
    assert_eq!(
        CorpusSource::open(&spec).unwrap().detected_token_column(),
        Some("tokens")
    );
    assert_eq!(all_contexts(&spec, opts(Split::All, 8)), got);
    let plain = dir.path().join("both.jsonl");
    std::fs::write(&plain, "\n{\"tokens\": [1, 2], \"input_ids\": [3, 4]}\n").unwrap();
    let source = CorpusSource::open(&CorpusSpec::new(plain.to_str().unwrap())).unwrap();
    assert_eq!(source.detected_token_column(), Some("input_ids"));

    // A text column wins; a column of that name that holds no integer lists is not taken.
    let text = dir.path().join("text.parquet");
    let t = texts(10);
    write_parquet(
        &text,
        vec![("text", text_column(&t)), ("input_ids", id_rows(10, 3))],
        4,
    );
    let spec = CorpusSpec::new(text.to_str().unwrap());
    assert_eq!(
        CorpusSource::open(&spec).unwrap().detected_token_column(),
        None
    );
    assert_eq!(all_contexts(&spec, opts(Split::All, 16)), packed(&t, 16));
    let strings = dir.path().join("strings.parquet");
    write_parquet(&strings, vec![("input_ids", text_column(&t))], 4);
    let e = CorpusSource::open(&CorpusSpec::new(strings.to_str().unwrap()))
        .and_then(|s| s.contexts(opts(Split::All, 16), None))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("column `text`") && e.contains("input_ids"),
        "{e}"
    );

    // A hub dataset alike.
    let hub = tempfile::tempdir().unwrap();
    let repo = fake_hub(hub.path(), &texts(12));
    let data = repo.join("snapshots/0123456789abcdef0123456789abcdef01234567/data");
    for f in std::fs::read_dir(&data).unwrap() {
        std::fs::remove_file(f.unwrap().path()).unwrap();
    }
    write_parquet(
        &data.join("train.parquet"),
        vec![("input_ids", id_rows(30, 5))],
        8,
    );
    let source = CorpusSource::open_with_hub(
        &CorpusSpec::new("hf:owner/name"),
        &[hub.path().to_path_buf()],
    )
    .unwrap();
    assert_eq!(source.detected_token_column(), Some("input_ids"));
    assert_eq!(
        source.contexts(opts(Split::All, 8), None).unwrap().tokens,
        got
    );
}
