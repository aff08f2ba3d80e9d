//! Metrics records and the sink that writes them to `metrics.jsonl` (and Weights & Biases) off the
//! training thread.

use crate::atomic::write_atomic;
use crate::error::{Error, Result};
use crate::run_dir::RunDir;
use crate::wandb::{Bridge, WandbOptions};
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Metric name → value. NaN and ±inf are kept in memory and written as JSON `null`.
pub type Metrics = BTreeMap<String, f64>;

/// Metric names shared by the trainers, the training loop and the report.
pub mod names {
    /// Wall time of one optimizer step, milliseconds (added by the training loop).
    pub const STEP_MS: &str = "step_ms";
    /// Time spent in top-k selection within the step, milliseconds (reported by the trainer).
    pub const SELECT_MS: &str = "select_ms";
    /// `select_ms / step_ms` (added by the training loop when the trainer reports `select_ms`).
    pub const SELECT_SHARE: &str = "select_share";
    /// Training tokens per second over the logging window (added by the training loop).
    pub const TOKENS_PER_S: &str = "tokens_per_s";
    /// Time the step waited for its batch of training data, milliseconds (reported by the trainer).
    pub const DATA_WAIT_MS: &str = "data_wait_ms";
    /// `data_wait_ms / step_ms` (added by the training loop when the trainer reports `data_wait_ms`).
    pub const DATA_WAIT_SHARE: &str = "data_wait_share";
    /// Training tokens per second of wall time since the run started, waits, evaluations and
    /// checkpoints included (added by the training loop).
    pub const RUN_TOKENS_PER_S: &str = "run_tokens_per_s";
    pub const LOSS: &str = "loss";
    /// Time of the in-run check's selection (the other selector, `selector.compare_with`, on the same
    /// input), milliseconds, on the steps that ran it: with `select_ms` of those steps, the speed-up a
    /// single run measures.
    pub const COMPARE_SELECT_MS: &str = "compare_select_ms";
}

/// Whether a record comes from a training step or from an evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordKind {
    Train,
    Eval,
}

impl RecordKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RecordKind::Train => "train",
            RecordKind::Eval => "eval",
        }
    }
}

/// One line of metrics.jsonl, e.g.
/// `{"step":100,"tokens":409600,"wall_s":12.5,"kind":"train","metrics":{"loss":0.12,"step_ms":98.1}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Completed optimizer steps when the record was taken.
    pub step: u64,
    /// Training tokens consumed so far.
    pub tokens: u64,
    /// Training wall time so far, seconds.
    pub wall_s: f64,
    pub kind: RecordKind,
    #[serde(deserialize_with = "metrics_with_nulls")]
    pub metrics: Metrics,
}

impl Record {
    pub fn train(step: u64, tokens: u64, wall_s: f64, metrics: Metrics) -> Record {
        Record {
            step,
            tokens,
            wall_s,
            kind: RecordKind::Train,
            metrics,
        }
    }
    pub fn eval(step: u64, tokens: u64, wall_s: f64, metrics: Metrics) -> Record {
        Record {
            kind: RecordKind::Eval,
            ..Record::train(step, tokens, wall_s, metrics)
        }
    }
    /// The record as one JSON line (with the trailing newline).
    pub fn to_json_line(&self) -> String {
        // A struct of numbers, strings and a string-keyed map always serializes.
        let mut line = serde_json::to_string(self).unwrap_or_default();
        line.push('\n');
        line
    }
}

/// JSON has no NaN: serde_json writes non-finite numbers as `null`, read back here as NaN.
fn metrics_with_nulls<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Metrics, D::Error> {
    let raw = BTreeMap::<String, Option<f64>>::deserialize(d)?;
    Ok(raw
        .into_iter()
        .map(|(k, v)| (k, v.unwrap_or(f64::NAN)))
        .collect())
}

/// Reads every record of a metrics.jsonl file. A torn last line (a run killed mid-write) is skipped;
/// a malformed line elsewhere is an error naming the line.
pub fn read_records(path: &Path) -> Result<Vec<Record>> {
    let file = File::open(path).map_err(Error::io("opening", path))?;
    let mut text = String::new();
    BufReader::new(file)
        .read_to_string(&mut text)
        .map_err(Error::io("reading", path))?;
    parse_records(&text, path)
}

/// The records of metrics.jsonl text (see [`read_records`]); `path` is named in errors.
pub fn parse_records(text: &str, path: &Path) -> Result<Vec<Record>> {
    let lines: Vec<&str> = text.lines().collect();
    let last_nonempty = lines.iter().rposition(|l| !l.trim().is_empty());
    let mut records = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Record>(line) {
            Ok(r) => records.push(r),
            Err(_) if Some(i) == last_nonempty => {}
            Err(e) => {
                return Err(Error::Parse {
                    path: path.to_path_buf(),
                    line: i + 1,
                    message: e.to_string(),
                })
            }
        }
    }
    Ok(records)
}

/// Where a sink's records go besides metrics.jsonl.
#[derive(Debug, Clone, Default)]
pub struct SinkOptions {
    /// Stream records to Weights & Biases through the Python bridge.
    pub wandb: Option<WandbOptions>,
}

enum Message {
    Record(Box<Record>),
    Flush(Sender<()>),
}

/// Writes metrics records on a background thread so that `log` never waits for the disk or the network.
///
/// Records are written in the order they were logged. Dropping the sink (or `finish`) writes every
/// record logged before, flushes and fsyncs the file, and closes the W&B bridge.
pub struct MetricsSink {
    path: PathBuf,
    tx: Option<Sender<Message>>,
    writer: Option<JoinHandle<()>>,
    first_error: Arc<Mutex<Option<String>>>,
}

impl MetricsSink {
    /// Starts a fresh `metrics.jsonl` in `run` (replacing any earlier content).
    pub fn create(run: &RunDir, options: SinkOptions) -> Result<MetricsSink> {
        Self::open(&run.metrics_path(), None, options)
    }

    /// Continues `run`'s metrics.jsonl after a resume from `resumed_step`: records past that step
    /// (logged after the checkpoint the run resumes from) are dropped, so that the file reads as one
    /// uninterrupted run.
    pub fn resume(run: &RunDir, resumed_step: u64, options: SinkOptions) -> Result<MetricsSink> {
        Self::open(&run.metrics_path(), Some(resumed_step), options)
    }

    /// A sink on any path: `keep_up_to = None` starts the file afresh, `Some(step)` keeps the records with
    /// `step <= step` and appends after them.
    pub fn open(path: &Path, keep_up_to: Option<u64>, options: SinkOptions) -> Result<MetricsSink> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::create_dir_all(parent).map_err(Error::io("creating directory", parent))?;
        }
        let file = match keep_up_to {
            None => File::create(path).map_err(Error::io("creating", path))?,
            Some(step) => {
                truncate_after(path, step)?;
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(Error::io("opening for append", path))?
            }
        };
        let bridge = options.wandb.map(Bridge::start);
        let (tx, rx) = mpsc::channel();
        let first_error = Arc::new(Mutex::new(None));
        let writer = {
            let thread_path = path.to_path_buf();
            let first_error = Arc::clone(&first_error);
            std::thread::Builder::new()
                .name("metrics-writer".into())
                .spawn(move || write_loop(rx, file, &thread_path, bridge, &first_error))
                .map_err(Error::io("starting the metrics writer for", path))?
        };
        Ok(MetricsSink {
            path: path.to_path_buf(),
            tx: Some(tx),
            writer: Some(writer),
            first_error,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Queues a record; returns at once.
    pub fn log(&self, record: Record) {
        if let Some(tx) = &self.tx {
            // The writer only stops when the sink is dropped, so a send cannot fail before that.
            let _ = tx.send(Message::Record(Box::new(record)));
        }
    }

    /// Waits until every record logged so far is in the file (not necessarily fsynced), and reports
    /// the first write error, if any.
    pub fn flush(&self) -> Result<()> {
        if let Some(tx) = &self.tx {
            let (ack_tx, ack_rx) = mpsc::channel();
            if tx.send(Message::Flush(ack_tx)).is_ok() {
                let _ = ack_rx.recv();
            }
        }
        self.error_status()
    }

    /// Writes everything, fsyncs, closes the W&B bridge (waiting for it to finish) and reports the
    /// first write error.
    pub fn finish(mut self) -> Result<()> {
        self.close();
        self.error_status()
    }

    fn error_status(&self) -> Result<()> {
        match lock(&self.first_error).clone() {
            Some(message) => Err(Error::Sink {
                path: self.path.clone(),
                message,
            }),
            None => Ok(()),
        }
    }

    fn close(&mut self) {
        self.tx.take();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

impl Drop for MetricsSink {
    fn drop(&mut self) {
        self.close();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn write_loop(
    rx: Receiver<Message>,
    file: File,
    path: &Path,
    mut bridge: Option<Bridge>,
    first_error: &Mutex<Option<String>>,
) {
    let mut out = BufWriter::new(file);
    let fail = |what: &str, e: std::io::Error| {
        let mut slot = lock(first_error);
        if slot.is_none() {
            eprintln!(
                "warning: {what} {}: {e}; later metrics may be lost",
                path.display()
            );
            *slot = Some(format!("{what}: {e}"));
        }
    };
    loop {
        // Write in batches while records keep coming; flush whenever the queue runs dry.
        let message = match rx.try_recv() {
            Ok(message) => message,
            Err(TryRecvError::Empty) => {
                if let Err(e) = out.flush() {
                    fail("flushing", e);
                }
                match rx.recv() {
                    Ok(message) => message,
                    Err(_) => break,
                }
            }
            Err(TryRecvError::Disconnected) => break,
        };
        match message {
            Message::Record(record) => {
                let line = record.to_json_line();
                if let Err(e) = out.write_all(line.as_bytes()) {
                    fail("writing", e);
                }
                if let Some(bridge) = &mut bridge {
                    bridge.send(line);
                }
            }
            Message::Flush(ack) => {
                if let Err(e) = out.flush() {
                    fail("flushing", e);
                }
                let _ = ack.send(());
            }
        }
    }
    match out.into_inner() {
        Ok(file) => {
            if let Err(e) = file.sync_all() {
                fail("syncing", e);
            }
        }
        Err(e) => fail("flushing", e.into_error()),
    }
    if let Some(bridge) = bridge {
        bridge.finish();
    }
}

/// Keeps the records with `step <= last_step` (and drops a torn last line), rewriting the file atomically.
fn truncate_after(path: &Path, last_step: u64) -> Result<()> {
    if !path.exists() {
        return Ok(());
    }
    let kept: String = read_records(path)?
        .iter()
        .filter(|r| r.step <= last_step)
        .map(Record::to_json_line)
        .collect();
    write_atomic(path, kept.as_bytes())
}

impl SinkOptions {
    /// Options for a run from its identity and `[log]` section: W&B when `log.wandb` is set.
    pub fn for_run(run: &RunDir, meta: &crate::run_dir::RunMeta, log: &crate::LogConfig) -> Self {
        SinkOptions {
            wandb: log.wandb.then(|| WandbOptions::for_run(run, meta, log)),
        }
    }
}
