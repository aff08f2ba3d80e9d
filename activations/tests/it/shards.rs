//! Extraction into shards (resume, byte-identity, config errors) and the shuffled reader.
use activations::corpus::{default_corpus, CorpusSource, CorpusSpec, PackOptions, Split};
use activations::shards::{
    extract, ExtractConfig, ExtractOptions, Manifest, ReaderOptions, ShardReader,
};
use activations::{ActivationSource, OnTheFly, OnTheFlyOptions};
use candle_core::{DType, Device, Tensor};
use gpt2::{Gpt2, Gpt2Config, HookPoint};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The CPU, and the GPU under the `cuda` feature.
fn devices() -> Vec<Device> {
    let mut devices = vec![Device::Cpu];
    if cfg!(feature = "cuda") {
        devices.push(Device::new_cuda(0).expect("the cuda feature needs a GPU"));
    }
    devices
}

struct Fixture {
    _dir: tempfile::TempDir,
    model_dir: String,
    corpus: String,
    root: std::path::PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Gpt2Config::miniature(3);
    let model_dir = dir.path().join("model");
    Gpt2::random(cfg, 11, DType::F32, &Device::Cpu)
        .unwrap()
        .save_hf(&model_dir)
        .unwrap();
    let corpus = dir.path().join("corpus.txt");
    let text: String = default_corpus().documents[0]
        .text
        .chars()
        .take(12_000)
        .collect();
    std::fs::write(&corpus, text).unwrap();
    Fixture {
        model_dir: model_dir.display().to_string(),
        corpus: corpus.display().to_string(),
        root: dir.path().to_path_buf(),
        _dir: dir,
    }
}

fn config(f: &Fixture, out: &str) -> ExtractConfig {
    let toml = format!(
        r#"
model = "{}"
out_dir = "{}"
hook_points = ["blocks.1.hook_resid_pre", "resid_post.2"]
tokens_per_shard = 700
batch_contexts = 4
writer_threads = 2
[data]
corpus = "{}"
split = "all"
context = 16
max_tokens = 3000
"#,
        f.model_dir,
        f.root.join(out).display(),
        f.corpus
    );
    ExtractConfig::from_toml(&toml, Path::new("test.toml")).unwrap()
}

/// A fresh fixture extracted with `config(.., out)`, and the directory of its shards.
fn extracted(out: &str) -> (Fixture, PathBuf) {
    let f = fixture();
    let cfg = config(&f, out);
    extract(&cfg, &ExtractOptions::default()).unwrap();
    (f, cfg.out_dir)
}

/// The error of an extraction that must fail.
fn refused(cfg: &ExtractConfig) -> String {
    extract(cfg, &ExtractOptions::default())
        .unwrap_err()
        .to_string()
}

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().to_string(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn killed_run_resumes_to_identical_shards() {
    let f = fixture();
    let full = extract(&config(&f, "full"), &ExtractOptions::default()).unwrap();
    assert!(full.complete);
    let m = &full.manifest;
    assert_eq!((m.total_tokens, m.shards.len(), m.d_model), (3000, 5, 32));
    assert_eq!(m.shards[4].n_tokens, 200);

    let cfg = config(&f, "resumed");
    let killed = extract(
        &cfg,
        &ExtractOptions {
            stop_after_new_shards: Some(2),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(!killed.complete);
    assert!(!cfg.out_dir.join("manifest.json").exists());
    // A leftover temporary file and a lost middle shard.
    std::fs::write(
        cfg.out_dir.join("shard-00002.safetensors.999.tmp"),
        b"partial",
    )
    .unwrap();
    let _ = std::fs::remove_file(cfg.out_dir.join("shard-00001.safetensors"));
    let resumed = extract(&cfg, &ExtractOptions::default()).unwrap();
    assert!(resumed.complete && resumed.shards_reused >= 1);
    assert_eq!(files(&f.root.join("full")), files(&cfg.out_dir));

    // Another configuration in the same directory is refused.
    let mut other = config(&f, "resumed");
    other.data.context = 8;
    let err = refused(&other);
    assert!(err.contains("different extraction"), "{err}");
}

#[test]
fn config_errors_name_the_key() {
    let f = fixture();
    let base = format!(
        "model = \"{}\"\nout_dir = \"x\"\nhook_points = [\"resid_post.0\"]\n",
        f.model_dir
    );
    let cases = [
        (
            format!("{base}tokens_per_shard = 10\nbatch_size = 3\n[data]\ncontext = 8\n"),
            "batch_size",
        ),
        (
            format!("{base}tokens_per_shard = 0\n[data]\ncontext = 8\n"),
            "tokens_per_shard",
        ),
        (
            format!("{base}tokens_per_shard = 10\ndtype = \"f64\"\n[data]\ncontext = 8\n"),
            "dtype",
        ),
        (
            format!("{base}tokens_per_shard = 10\n[data]\ncontext = 8\nsplit = \"test\"\n"),
            "split",
        ),
        (format!("{base}tokens_per_shard = 10\n"), "data"),
        (
            format!("{base}tokens_per_shard = 10\n[corpus]\ncontext_len = 8\n"),
            "renamed to `data.context`",
        ),
    ];
    for (toml, key) in cases {
        let err = ExtractConfig::from_toml(&toml, Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(key), "{key}: {err}");
    }
    // A bad value is placed at its line of the user's file (line 5 here), a bad override at the --set.
    let text = format!("{base}\ntokens_per_shard = \"ten\"\n[data]\ncontext = 8\n");
    let path = f.root.join("c.toml");
    std::fs::write(&path, &text).unwrap();
    let in_file = ExtractConfig::load(&path, &["data.context=16".into()])
        .unwrap_err()
        .to_string();
    assert!(
        in_file.starts_with(&format!("{}:5: ", path.display())),
        "{in_file}"
    );
    std::fs::write(&path, text.replace("\"ten\"", "10")).unwrap();
    let set = ExtractConfig::load(&path, &["data.context=abc".into()])
        .unwrap_err()
        .to_string();
    assert!(
        set.starts_with("--set data.context=abc: invalid type"),
        "{set}"
    );
    let mut cfg = config(&f, "bad");
    cfg.hook_points = vec![HookPoint::ResidPost(3)];
    let err = refused(&cfg);
    assert!(
        err.contains("hook_points") && err.contains("3 layers"),
        "{err}"
    );
    let mut cfg = config(&f, "bad");
    cfg.data.context = 64;
    let err = refused(&cfg);
    assert!(err.contains("n_positions"), "{err}");
}

fn drain(reader: &mut dyn ActivationSource, n: usize) -> Vec<Tensor> {
    let mut out = Vec::new();
    while let Some(b) = reader.next_batch(n).unwrap() {
        out.push(b);
    }
    out
}

fn sum(ts: &[Tensor]) -> f64 {
    ts.iter()
        .map(|t| {
            t.to_dtype(DType::F64)
                .unwrap()
                .sum_all()
                .unwrap()
                .to_scalar::<f64>()
                .unwrap()
        })
        .sum()
}

#[test]
fn reader_shuffles_deterministically_and_checks_shards() {
    let (_f, dir) = extracted("data");
    let opts = ReaderOptions {
        buffer_bytes: 1000 * 2 * 32 * 4,
        seed: 5,
        ..Default::default()
    };
    let mut reader = ShardReader::open(&dir, opts.clone()).unwrap();
    let batches = drain(&mut reader, 256);
    assert_eq!(batches[0].dims(), &[256, 2, 32]);
    assert_eq!(
        batches.iter().map(|b| b.dim(0).unwrap()).sum::<usize>(),
        3000
    );
    // Same rows as the shards in another order; same order for the same seed.
    let stored: Vec<Tensor> = (0..5).map(|i| reader.load_shard(i).unwrap().0).collect();
    assert!((sum(&batches) - sum(&stored)).abs() < 1e-6 * sum(&stored).abs().max(1.0));
    let first_rows = stored[0].narrow(0, 0, 256).unwrap();
    let diff = (batches[0].clone() - first_rows)
        .unwrap()
        .abs()
        .unwrap()
        .sum_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    assert!(diff > 0.0, "the first batch was not shuffled");
    let again = drain(&mut ShardReader::open(&dir, opts.clone()).unwrap(), 256);
    let other = drain(
        &mut ShardReader::open(
            &dir,
            ReaderOptions {
                seed: 6,
                ..opts.clone()
            },
        )
        .unwrap(),
        256,
    );
    let same = |a: &Tensor, b: &Tensor| {
        a.eq(b)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
            .mean_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
            == 1.0
    };
    assert!(same(&batches[3], &again[3]));
    assert!(!same(&batches[3], &other[3]));

    // One hook point of the two: [n, d]; repeat gives more than one epoch.
    let one = ReaderOptions {
        hook_points: Some(vec![HookPoint::ResidPost(2)]),
        repeat: true,
        ..opts.clone()
    };
    let mut r = ShardReader::open(&dir, one).unwrap();
    for _ in 0..20 {
        assert_eq!(r.next_batch(300).unwrap().unwrap().dims(), &[300, 32]);
    }
    assert!(r.epoch() >= 1);
    let absent = ReaderOptions {
        hook_points: Some(vec![HookPoint::ResidPost(0)]),
        ..opts.clone()
    };
    assert!(ShardReader::open(&dir, absent)
        .err()
        .unwrap()
        .to_string()
        .contains("not stored"));

    // A corrupt shard, a manifest that disagrees, a missing shard.
    let shard = dir.join("shard-00003.safetensors");
    let good = std::fs::read(&shard).unwrap();
    let mut bad = good.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    std::fs::write(&shard, &bad).unwrap();
    let err = drain_err(&dir, &opts);
    assert!(
        err.contains("shard-00003") && err.contains("sha256"),
        "{err}"
    );
    std::fs::write(&shard, &good).unwrap();
    let manifest_text = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    let mut m: Manifest = serde_json::from_str(&manifest_text).unwrap();
    m.dtype = "bf16".into();
    m.write(&dir).unwrap();
    let err = drain_err(&dir, &opts);
    assert!(err.contains("manifest says"), "{err}");
    std::fs::write(dir.join("manifest.json"), manifest_text).unwrap();
    std::fs::remove_file(&shard).unwrap();
    let err = ShardReader::open(&dir, opts).err().unwrap().to_string();
    assert!(
        err.contains("missing") && err.contains("shard-00003"),
        "{err}"
    );
}

fn drain_err(dir: &Path, opts: &ReaderOptions) -> String {
    let mut r = ShardReader::open(dir, opts.clone()).unwrap();
    loop {
        match r.next_batch(512) {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("expected an error"),
            Err(e) => return e.to_string(),
        }
    }
}

#[test]
fn on_the_fly_serves_the_same_activations() {
    let f = fixture();
    let mut cfg = config(&f, "otf");
    cfg.data.max_tokens = None;
    let report = extract(&cfg, &ExtractOptions::default()).unwrap();
    let reader = ShardReader::open(&cfg.out_dir, ReaderOptions::default()).unwrap();
    let stored: Vec<Tensor> = (0..report.manifest.shards.len())
        .map(|i| reader.load_shard(i).unwrap().0)
        .collect();

    let model = Arc::new(models::Model::Gpt2(
        Gpt2::load(&f.model_dir, DType::F32, &Device::Cpu).unwrap(),
    ));
    let pack = PackOptions {
        split: Split::All,
        heldout_fraction: 0.0,
        context_len: 16,
        prepend_bos: true,
        tokenizer: activations::Tokenizer::new().unwrap(),
    };
    let contexts = CorpusSource::open(&CorpusSpec::new(f.corpus.as_str()))
        .unwrap()
        .contexts(pack, None)
        .unwrap();
    let hooks = cfg.hook_points.clone();
    let opts = OnTheFlyOptions {
        batch_contexts: 4,
        buffer_tokens: 500,
        ..Default::default()
    };
    let mut otf = OnTheFly::new(model, contexts, hooks, opts).unwrap();
    let served = drain(&mut otf, 128);
    assert_eq!(
        served.iter().map(|b| b.dim(0).unwrap()).sum::<usize>(),
        report.manifest.total_tokens
    );
    assert!((sum(&served) - sum(&stored)).abs() < 1e-4 * sum(&stored).abs().max(1.0));
}

#[test]
fn prefetch_serves_the_same_batches_as_inline_reading() {
    let (_f, dir) = extracted("prefetch");
    for mix_shards in [1, 2, 5] {
        let opts = |prefetch, device: &Device| ReaderOptions {
            buffer_bytes: 600 * 2 * 32 * 4,
            seed: 3,
            repeat: true,
            mix_shards,
            prefetch,
            chunk_tokens: 100,
            device: device.clone(),
            ..Default::default()
        };
        let take = |prefetch, device: &Device| {
            let mut r = ShardReader::open(&dir, opts(prefetch, device)).unwrap();
            // 24 batches of 256 rows: two epochs of 3000 and a part of the third.
            (0..24)
                .map(|_| {
                    let b = r.next_batch(256).unwrap().unwrap();
                    assert!(b.device().same_device(device));
                    b.to_device(&Device::Cpu).unwrap()
                })
                .collect::<Vec<_>>()
        };
        let reference = take(0, &Device::Cpu);
        // On a GPU the rows go up through the page-locked copy stream; the stream must not change.
        for device in devices() {
            for prefetch in [0, 3] {
                let served = take(prefetch, &device);
                for (i, (a, b)) in reference.iter().zip(&served).enumerate() {
                    let diff = (a - b).unwrap().abs().unwrap().sum_all().unwrap();
                    assert_eq!(
                        diff.to_scalar::<f32>().unwrap(),
                        0.0,
                        "{device:?}, mix_shards {mix_shards}, prefetch {prefetch}: batch {i} differs"
                    );
                }
            }
        }
    }
}

#[test]
fn blocks_of_several_shards_mix_in_every_chunk() {
    let (_f, dir) = extracted("mix");
    // The stored rows of each shard, to tell which shard a served row came from.
    let probe = ShardReader::open(&dir, ReaderOptions::default()).unwrap();
    let row_sums: Vec<Vec<f32>> = (0..5)
        .map(|i| {
            let (acts, _) = probe.load_shard(i).unwrap();
            acts.sum_keepdim((1, 2))
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap()
        })
        .collect();
    let shard_of = |v: f32| row_sums.iter().position(|s| s.contains(&v));
    let opts = ReaderOptions {
        buffer_bytes: 200 * 2 * 32 * 4,
        seed: 1,
        mix_shards: 5,
        chunk_tokens: 200,
        ..Default::default()
    };
    let mut r = ShardReader::open(&dir, opts).unwrap();
    let batch = r.next_batch(100).unwrap().unwrap();
    let sums: Vec<f32> = batch
        .sum_keepdim((1, 2))
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    let mut shards: Vec<usize> = sums.iter().filter_map(|&v| shard_of(v)).collect();
    shards.sort();
    shards.dedup();
    assert!(
        shards.len() >= 3,
        "the first batch holds rows of shards {shards:?} only"
    );
}

#[test]
fn shards_are_hashed_once_per_process_and_rechecked_when_rewritten() {
    let (_f, dir) = extracted("once");
    let opts = ReaderOptions {
        buffer_bytes: 500 * 2 * 32 * 4,
        repeat: true,
        prefetch: 2,
        ..Default::default()
    };
    let mut r = ShardReader::open(&dir, opts.clone()).unwrap();
    // Three epochs.
    for _ in 0..30 {
        r.next_batch(300).unwrap().unwrap();
    }
    assert!(r.epoch() >= 2);
    assert_eq!(
        r.shards_hashed(),
        5,
        "a shard was hashed again in a later epoch"
    );
    drop(r);

    // A shard corrupted mid-run is caught before its rows are served, with prefetch on.
    let shard = dir.join("shard-00002.safetensors");
    let mut bad = std::fs::read(&shard).unwrap();
    let mid = bad.len() / 2;
    bad[mid] ^= 0x40;
    std::fs::write(&shard, &bad).unwrap();
    let mut r = ShardReader::open(&dir, opts).unwrap();
    let err = loop {
        match r.next_batch(300) {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("expected an error"),
            Err(e) => break e.to_string(),
        }
    };
    assert!(
        err.contains("shard-00002") && err.contains("sha256"),
        "{err}"
    );
}
