//! Where a run's metrics go: one small interface, written as metrics.jsonl (one JSON object per line).
use crate::{Error, Result};
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};

pub trait MetricsSink {
    /// Records one step or evaluation; `record` is a JSON object.
    fn record(&mut self, record: Value) -> Result<()>;
    fn flush(&mut self) -> Result<()>;
}

/// Appends to `<run dir>/metrics.jsonl`.
pub struct JsonlSink {
    path: PathBuf,
    file: std::io::BufWriter<std::fs::File>,
}

impl JsonlSink {
    pub fn open(run_dir: &Path) -> Result<Self> {
        let path = run_dir.join("metrics.jsonl");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        Ok(Self {
            path,
            file: std::io::BufWriter::new(file),
        })
    }
}

impl MetricsSink for JsonlSink {
    fn record(&mut self, record: Value) -> Result<()> {
        writeln!(self.file, "{record}").map_err(|e| Error::io(&self.path, e))
    }
    fn flush(&mut self) -> Result<()> {
        self.file.flush().map_err(|e| Error::io(&self.path, e))
    }
}

/// Keeps records in memory (tests).
#[derive(Default)]
pub struct MemorySink {
    pub records: Vec<Value>,
}

impl MetricsSink for MemorySink {
    fn record(&mut self, record: Value) -> Result<()> {
        self.records.push(record);
        Ok(())
    }
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }
}
