//! Data files of a streamed corpus and the documents they hold, read a row group or a few
//! thousand lines at a time.
use super::parquet::ParquetDocuments;
use crate::error::{Error, Result};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

/// How a data file is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// One document: the whole file.
    Text,
    /// One document per line, from a JSON object's text field; plain, gzip or zstd.
    Jsonl(Compression),
    /// One document per row, from a column.
    Parquet,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl FileKind {
    /// The kind of `path` by its name (`.txt`, `.jsonl`, `.jsonl.gz`, `.jsonl.zst`, `.parquet`).
    pub fn of(path: &Path) -> Option<Self> {
        let name = path.file_name()?.to_str()?;
        if name.ends_with(".parquet") {
            Some(FileKind::Parquet)
        } else if name.ends_with(".jsonl") {
            Some(FileKind::Jsonl(Compression::None))
        } else if name.ends_with(".jsonl.gz") {
            Some(FileKind::Jsonl(Compression::Gzip))
        } else if name.ends_with(".jsonl.zst") || name.ends_with(".jsonl.zstd") {
            Some(FileKind::Jsonl(Compression::Zstd))
        } else if name.ends_with(".txt") {
            Some(FileKind::Text)
        } else {
            None
        }
    }

    /// Whether the file can be read whole into a [`super::Corpus`] (uncompressed text and JSONL).
    pub fn in_memory(self) -> bool {
        matches!(self, FileKind::Text | FileKind::Jsonl(Compression::None))
    }
}

/// One file of a corpus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataFile {
    pub path: PathBuf,
    /// The path relative to the corpus root: documents are named (and split) by it, so the split does
    /// not depend on where the corpus lies.
    pub name: String,
    pub kind: FileKind,
}

/// Every file under `dir`, recursively, sorted by path.
pub(crate) fn files_under(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = std::fs::read_dir(&d).map_err(|e| Error::io(&d, e))?;
        for entry in entries {
            let p = entry.map_err(|e| Error::io(&d, e))?.path();
            // A hub snapshot holds symlinks into its blobs: `is_dir` follows them.
            if p.is_dir() {
                stack.push(p);
            } else {
                files.push(p);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// The data files under `root` (itself when it is a file), recursively, sorted by path.
/// `accept` chooses among the known kinds.
pub fn data_files(root: &Path, accept: impl Fn(FileKind) -> bool) -> Result<Vec<DataFile>> {
    let paths = if root.is_file() {
        vec![root.to_path_buf()]
    } else {
        files_under(root)?
    };
    Ok(paths
        .into_iter()
        .filter_map(|path| {
            let kind = FileKind::of(&path).filter(|k| accept(*k))?;
            let name = if root.is_file() {
                path.file_name()?.to_string_lossy().into_owned()
            } else {
                path.strip_prefix(root)
                    .unwrap_or(&path)
                    .to_string_lossy()
                    .into_owned()
            };
            Some(DataFile { path, name, kind })
        })
        .collect())
}

/// The lines of a JSONL file, decompressed.
pub(crate) fn open_lines(path: &Path, compression: Compression) -> Result<Box<dyn BufRead + Send>> {
    let raw = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    Ok(match compression {
        Compression::None => Box::new(BufReader::new(raw)),
        Compression::Gzip => Box::new(BufReader::new(flate2::read::MultiGzDecoder::new(
            BufReader::new(raw),
        ))),
        Compression::Zstd => Box::new(BufReader::new(
            zstd::stream::read::Decoder::new(raw).map_err(|e| Error::io(path, e))?,
        )),
    })
}

/// What a document holds: text to tokenize, or token ids used as they are.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    Text(String),
    Tokens(Vec<u32>),
}

/// A document and where it is: its file's name and its row (line for JSONL, 0 for text files).
#[derive(Debug, Clone, PartialEq)]
pub struct RawDocument {
    pub file: usize,
    pub row: u64,
    pub payload: Payload,
}

/// Which field of a record holds the document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    Text(String),
    Tokens(String),
}

impl Field {
    pub fn name(&self) -> &str {
        match self {
            Field::Text(c) | Field::Tokens(c) => c,
        }
    }
}

/// The documents of a list of files, in order, a batch at a time.
pub struct DocumentReader {
    dataset: String,
    files: Vec<DataFile>,
    field: Field,
    next_file: usize,
    open: Option<OpenFile>,
}

enum OpenFile {
    Text(Option<String>),
    Lines {
        lines: Box<dyn BufRead + Send>,
        line: u64,
    },
    Parquet(ParquetDocuments),
}

/// Documents per batch from line-oriented files.
const LINES_PER_BATCH: usize = 1024;

impl DocumentReader {
    pub fn new(dataset: &str, files: Vec<DataFile>, field: Field) -> Self {
        Self {
            dataset: dataset.to_string(),
            files,
            field,
            next_file: 0,
            open: None,
        }
    }

    pub fn files(&self) -> &[DataFile] {
        &self.files
    }

    /// Back to the first document.
    pub fn restart(&mut self) {
        self.next_file = 0;
        self.open = None;
    }

    /// The next documents (a row group's batch, a thousand lines, a text file); None at the end.
    pub fn next_batch(&mut self) -> Result<Option<Vec<RawDocument>>> {
        loop {
            if self.open.is_none() {
                if self.next_file == self.files.len() {
                    return Ok(None);
                }
                self.open = Some(self.open_file(self.next_file)?);
                self.next_file += 1;
            }
            let file = self.next_file - 1;
            let Some(mut open) = self.open.take() else {
                continue;
            };
            match self.read(&mut open, file)? {
                Some(docs) => {
                    self.open = Some(open);
                    if !docs.is_empty() {
                        return Ok(Some(docs));
                    }
                }
                None => self.open = None,
            }
        }
    }

    fn open_file(&self, index: usize) -> Result<OpenFile> {
        let f = &self.files[index];
        Ok(match f.kind {
            FileKind::Text => OpenFile::Text(Some(
                std::fs::read_to_string(&f.path).map_err(|e| Error::io(&f.path, e))?,
            )),
            FileKind::Jsonl(c) => OpenFile::Lines {
                lines: open_lines(&f.path, c)?,
                line: 0,
            },
            FileKind::Parquet => {
                OpenFile::Parquet(ParquetDocuments::open(&self.dataset, &f.path, &self.field)?)
            }
        })
    }

    /// The next documents of the open file; None when it is done.
    fn read(&self, open: &mut OpenFile, file: usize) -> Result<Option<Vec<RawDocument>>> {
        let path = &self.files[file].path;
        match open {
            OpenFile::Text(text) => Ok(text.take().map(|t| {
                vec![RawDocument {
                    file,
                    row: 0,
                    payload: Payload::Text(t),
                }]
            })),
            OpenFile::Parquet(p) => Ok(p.next_batch()?.map(|rows| {
                rows.into_iter()
                    .map(|(row, payload)| RawDocument { file, row, payload })
                    .collect()
            })),
            OpenFile::Lines { lines, line } => {
                let mut docs = Vec::new();
                let mut buf = String::new();
                while docs.len() < LINES_PER_BATCH {
                    buf.clear();
                    let n = lines.read_line(&mut buf).map_err(|e| Error::io(path, e))?;
                    if n == 0 {
                        return Ok((!docs.is_empty()).then_some(docs));
                    }
                    *line += 1;
                    if buf.trim().is_empty() {
                        continue;
                    }
                    let payload = self.json_payload(&buf, path, *line)?;
                    docs.push(RawDocument {
                        file,
                        row: *line,
                        payload,
                    });
                }
                Ok(Some(docs))
            }
        }
    }

    fn json_payload(&self, line: &str, path: &Path, number: u64) -> Result<Payload> {
        let column = self.field.name();
        let bad = |message: String| Error::Dataset {
            dataset: self.dataset.clone(),
            file: path.to_path_buf(),
            column: Some(column.to_string()),
            message: format!("line {number}: {message}"),
        };
        let value: serde_json::Value =
            serde_json::from_str(line).map_err(|e| bad(format!("invalid JSON: {e}")))?;
        let field = value
            .get(column)
            .ok_or_else(|| bad("no such field".into()))?;
        match &self.field {
            Field::Text(_) => field
                .as_str()
                .map(|s| Payload::Text(s.to_string()))
                .ok_or_else(|| bad("not a string".into())),
            Field::Tokens(_) => {
                let ids = field
                    .as_array()
                    .ok_or_else(|| bad("not a list of token ids".into()))?;
                ids.iter()
                    .map(|v| {
                        v.as_i64()
                            .ok_or_else(|| bad(format!("{v} is not an integer token id")))
                            .and_then(|id| super::token_id(id).map_err(bad))
                    })
                    .collect::<Result<Vec<u32>>>()
                    .map(Payload::Tokens)
            }
        }
    }
}
