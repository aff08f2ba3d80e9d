//! The README's `train-sae configs/tiny.toml` on every form of corpus training accepts, end to end: each run
//! exits 0 and writes features.json, read through the reader training uses. The corpora are written from
//! the shipped Shakespeare; the overrides make a run take seconds.
use activations::corpus::default_corpus;
use activations::Gpt2Tokenizer;
use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, ListArray, RecordBatch, StringArray};
use parquet::arrow::ArrowWriter;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

const TRAIN_SAE: &str = env!("CARGO_BIN_EXE_train-sae");
const EXTRACT: &str = env!("CARGO_BIN_EXE_extract");
const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A few seconds of training, a small held-out evaluation and a small SAE.
const QUICK: &[&str] = &[
    "train.steps=4",
    "train.batch_size=128",
    "train.warmup_steps=1",
    "train.checkpoint_every=0",
    "data.held_out_tokens=64",
    "data.buffer_tokens=512",
    "data.prefetch=0",
    "eval.ce_contexts=2",
    "sae.latents=64",
    "sae.k=4",
    "selector.compare=false",
    "log.progress=false",
];

/// Paragraphs of the shipped corpus, as documents of a few hundred characters.
fn documents(n: usize) -> Vec<String> {
    default_corpus()
        .documents
        .iter()
        .flat_map(|d| d.text.split("\n\n").map(str::trim).collect::<Vec<_>>())
        .filter(|p| p.len() > 200)
        .take(n)
        .map(str::to_string)
        .collect()
}

fn jsonl(field: &str, docs: &[String]) -> String {
    docs.iter()
        .map(|d| serde_json::json!({ field: d, "id": 1 }).to_string() + "\n")
        .collect()
}

fn token_lists(docs: &[String]) -> Vec<Vec<i64>> {
    let tok = Gpt2Tokenizer::new().unwrap();
    docs.iter()
        .map(|d| tok.encode(d).unwrap().into_iter().map(i64::from).collect())
        .collect()
}

fn write_parquet(path: &Path, columns: Vec<(&str, ArrayRef)>) {
    let batch = RecordBatch::try_from_iter(columns).unwrap();
    let file = std::fs::File::create(path).unwrap();
    let mut w = ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

fn texts(docs: &[String]) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(docs))
}

fn ids(docs: &[String]) -> ArrayRef {
    let rows = token_lists(docs)
        .into_iter()
        .map(|r| Some(r.into_iter().map(Some)));
    Arc::new(ListArray::from_iter_primitive::<Int64Type, _, _>(rows))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `train-sae configs/tiny.toml` with the quick overrides (those `sets` names replaced) and `sets`,
/// into `out`.
fn train(out: &Path, sets: &[String], env: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new(TRAIN_SAE);
    cmd.current_dir(out.parent().unwrap())
        .arg(Path::new(ROOT).join("configs/tiny.toml"));
    let key = |s: &str| s.split('=').next().unwrap_or_default().to_string();
    let quick = QUICK
        .iter()
        .filter(|q| sets.iter().all(|s| key(s) != key(q)))
        .map(|q| q.to_string());
    for s in quick.chain(sets.iter().cloned()) {
        cmd.arg("--set").arg(s);
    }
    cmd.arg("--out").arg(out);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// The run exited 0 with a features.json of sampled latents; returns its stderr and run.json facts.
fn assert_dashboards(out: &Path, run: &Output) -> (String, serde_json::Value) {
    let stderr = text(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let features = std::fs::read_to_string(out.join("features.json"))
        .unwrap_or_else(|e| panic!("{}: {e}\n{stderr}", out.join("features.json").display()));
    let f: serde_json::Value = serde_json::from_str(&features).unwrap();
    assert!(f["n_tokens"].as_u64().unwrap() > 0, "{features}");
    assert!(!f["latents"].as_array().unwrap().is_empty(), "{features}");
    let run_json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
    (stderr, run_json)
}

/// Writes a corpus with `make(dir)` and trains on it with `sets` (`{}` in them is the corpus path).
fn trains_on(make: impl FnOnce(&Path) -> PathBuf, sets: &[&str]) -> (String, serde_json::Value) {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = make(tmp.path());
    let mut all = vec![format!("data.corpus={}", corpus.display())];
    all.extend(sets.iter().map(|s| s.to_string()));
    let out = tmp.path().join("run");
    let run = train(&out, &all, &[]);
    assert_dashboards(&out, &run)
}

/// The facts a run recorded (run.json's `details`).
fn facts(run_json: &serde_json::Value) -> String {
    run_json["details"].to_string()
}

#[test]
fn a_txt_file() {
    // One document: no held-out split, so no held-out evaluation; dashboards from the training split.
    let (_, run) = trains_on(
        |dir| {
            let p = dir.join("book.txt");
            std::fs::write(&p, documents(120).join("\n\n")).unwrap();
            p
        },
        &["data.held_out_tokens=0"],
    );
    assert!(facts(&run).contains("training split"), "{run}");
}

#[test]
fn a_directory_of_txt_files() {
    let (_, run) = trains_on(
        |dir| {
            let d = dir.join("books");
            std::fs::create_dir(&d).unwrap();
            for (i, part) in documents(200).chunks(5).enumerate() {
                std::fs::write(d.join(format!("{i:02}.txt")), part.join("\n\n")).unwrap();
            }
            d
        },
        &[],
    );
    assert!(facts(&run).contains("held-out split"), "{run}");
}

#[test]
fn jsonl_plain_gzip_and_zstd() {
    let body = jsonl("text", &documents(200));
    trains_on(
        |dir| {
            let p = dir.join("docs.jsonl");
            std::fs::write(&p, &body).unwrap();
            p
        },
        &[],
    );
    trains_on(
        |dir| {
            let p = dir.join("docs.jsonl.gz");
            let mut gz = flate2::write::GzEncoder::new(
                std::fs::File::create(&p).unwrap(),
                flate2::Compression::fast(),
            );
            gz.write_all(body.as_bytes()).unwrap();
            gz.finish().unwrap();
            p
        },
        &[],
    );
    trains_on(
        |dir| {
            let p = dir.join("docs.jsonl.zst");
            std::fs::write(&p, zstd::encode_all(body.as_bytes(), 1).unwrap()).unwrap();
            p
        },
        &[],
    );
}

#[test]
fn jsonl_with_another_text_column() {
    trains_on(
        |dir| {
            let p = dir.join("docs.jsonl");
            std::fs::write(&p, jsonl("body", &documents(200))).unwrap();
            p
        },
        &["data.text_column=body"],
    );
}

#[test]
fn a_directory_of_parquet_files_with_text() {
    trains_on(
        |dir| {
            let d = dir.join("pq");
            std::fs::create_dir(&d).unwrap();
            let docs = documents(200);
            write_parquet(
                &d.join("train-0.parquet"),
                vec![("text", texts(&docs[..120]))],
            );
            write_parquet(
                &d.join("train-1.parquet"),
                vec![("text", texts(&docs[120..]))],
            );
            d
        },
        &[],
    );
}

#[test]
fn parquet_with_a_token_column() {
    trains_on(
        |dir| {
            let p = dir.join("ids.parquet");
            write_parquet(&p, vec![("ids", ids(&documents(200)))]);
            p
        },
        &["data.token_column=ids"],
    );
}

#[test]
fn input_ids_are_found_without_a_key_in_parquet_and_jsonl() {
    let docs = documents(200);
    let (stderr, run) = trains_on(
        |dir| {
            let p = dir.join("pretokenized.parquet");
            write_parquet(&p, vec![("input_ids", ids(&docs)), ("title", texts(&docs))]);
            p
        },
        &[],
    );
    assert!(
        stderr.contains("no \"text\" column; reading token ids from \"input_ids\""),
        "{stderr}"
    );
    assert!(facts(&run).contains("input_ids"), "{run}");

    let (stderr, _) = trains_on(
        |dir| {
            let p = dir.join("pretokenized.jsonl");
            let lines: String = token_lists(&docs)
                .iter()
                .map(|ids| serde_json::json!({ "input_ids": ids }).to_string() + "\n")
                .collect();
            std::fs::write(&p, lines).unwrap();
            p
        },
        &[],
    );
    assert!(stderr.contains("\"input_ids\""), "{stderr}");
}

#[test]
fn a_hub_dataset_from_the_offline_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let hub = tmp.path().join("hub");
    let repo = hub.join("datasets--me--shakes");
    let hash = "0123456789abcdef0123456789abcdef01234567";
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), hash).unwrap();
    let data = repo.join("snapshots").join(hash).join("data");
    std::fs::create_dir_all(&data).unwrap();
    let docs = documents(200);
    write_parquet(
        &data.join("train-00000-of-00002.parquet"),
        vec![("text", texts(&docs[..100]))],
    );
    write_parquet(
        &data.join("train-00001-of-00002.parquet"),
        vec![("text", texts(&docs[100..]))],
    );
    let out = tmp.path().join("run");
    let no_home = tmp.path().join("no-home");
    let run = train(
        &out,
        &["data.corpus=hf:me/shakes".into()],
        &[
            ("HF_HUB_CACHE", hub.as_path()),
            ("HF_HOME", no_home.as_path()),
        ],
    );
    assert_dashboards(&out, &run);
}

/// `extract configs/tiny-extract.toml` of `split` into `out`, a few thousand tokens.
fn extract(dir: &Path, out: &str, split: &str) -> PathBuf {
    let out = dir.join(out);
    let run = Command::new(EXTRACT)
        .current_dir(dir)
        .arg(Path::new(ROOT).join("configs/tiny-extract.toml"))
        .args(["--set", &format!("out_dir={}", out.display())])
        .args(["--set", &format!("data.split={split}")])
        .args([
            "--set",
            "data.max_tokens=4000",
            "--set",
            "tokens_per_shard=1024",
        ])
        .args(["--set", "data.context=64", "--quiet"])
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", text(&run.stderr));
    out
}

#[test]
fn a_shards_run_gets_dashboards_from_its_held_out_shards() {
    let tmp = tempfile::tempdir().unwrap();
    let train_dir = extract(tmp.path(), "train", "train");
    let held_dir = extract(tmp.path(), "heldout", "heldout");
    let cfg = tmp.path().join("shards.toml");
    std::fs::write(
        &cfg,
        format!(
            "name = \"tiny-shards\"\ndevice = \"cpu\"\n[data]\nsource = \"shards\"\ndir = \"{}\"\n\
             held_out_dir = \"{}\"\nbuffer_tokens = 512\nprefetch = 0\n\
             [sae]\nlatents = 64\nk = 4\n[train]\nbatch_size = 128\nsteps = 4\nlr = 1e-3\n\
             [log]\nprogress = false\n",
            train_dir.display(),
            held_dir.display()
        ),
    )
    .unwrap();
    let out = tmp.path().join("run");
    let run = Command::new(TRAIN_SAE)
        .current_dir(tmp.path())
        .arg(&cfg)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let (_, run_json) = assert_dashboards(&out, &run);
    assert!(facts(&run_json).contains("held-out shards"), "{run_json}");
    let f: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("features.json")).unwrap()).unwrap();
    assert_eq!(f["hooks"][0], "blocks.2.hook_resid_post");
}

#[test]
fn a_run_without_tokens_says_it_has_no_dashboards_and_exits_0() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("synthetic.toml");
    std::fs::write(
        &cfg,
        "name = \"syn\"\n[data]\nsource = \"synthetic\"\nd_model = 8\nfeatures = 24\n\
         active_per_token = 2\nheld_out_tokens = 64\n[sae]\nlatents = 16\nk = 2\n\
         [train]\nbatch_size = 32\nsteps = 3\nlr = 1e-3\n[log]\nprogress = false\n",
    )
    .unwrap();
    let out = tmp.path().join("run");
    let run = Command::new(TRAIN_SAE)
        .arg(&cfg)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = text(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(
        stderr.contains("no feature dashboards: synthetic data"),
        "{stderr}"
    );
    assert!(!out.join("features.json").exists());
}
