//! The one way every command opens its corpus: `[data] corpus` and its column keys.
use super::detect;
use super::files::{data_files, DataFile, DocumentReader, Field, FileKind};
use super::hub::{self, HubDataset};
use super::stream::{ContextStream, CorpusStream, PackOptions};
use super::{Contexts, Corpus, Split};
use crate::error::{Error, Result};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// The default text column of parquet and JSONL corpora.
pub const DEFAULT_TEXT_COLUMN: &str = "text";

/// What a config names as its corpus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorpusSpec {
    /// `default`, a file (`.txt`, `.jsonl`, `.jsonl.gz`, `.jsonl.zst`, `.parquet`), a directory of
    /// them, or a hub dataset `hf:OWNER/NAME[/SUBDIR][@REVISION]`.
    pub corpus: String,
    /// The column (JSON field) with the text; default `text`.
    pub text_column: Option<String>,
    /// The column with token ids (a list of integers per row), used as they are instead of text.
    pub token_column: Option<String>,
}

impl CorpusSpec {
    /// `corpus` with the default columns.
    pub fn new(corpus: impl Into<String>) -> Self {
        Self {
            corpus: corpus.into(),
            text_column: None,
            token_column: None,
        }
    }

    /// The field a config names; None when it names neither column.
    fn field(&self) -> Result<Option<Field>> {
        match (&self.text_column, &self.token_column) {
            (Some(_), Some(_)) => Err(Error::config(
                "data.token_column",
                "set either text_column or token_column, not both",
            )),
            (_, Some(c)) => Ok(Some(Field::Tokens(c.clone()))),
            (Some(c), None) => Ok(Some(Field::Text(c.clone()))),
            (None, None) => Ok(None),
        }
    }
}

/// An opened corpus. Small text corpora (`default`, `.txt` and `.jsonl` with a `text` field) are
/// read whole and split by an exact count of documents ([`Corpus::split`]); everything else
/// (parquet, compressed JSONL, other columns, hub datasets) is streamed and split document by
/// document ([`super::stream::is_heldout`]).
#[derive(Debug, Clone)]
pub enum CorpusSource {
    InMemory(Corpus),
    Streamed {
        /// The spec as written, for messages.
        dataset: String,
        files: Vec<DataFile>,
        field: Field,
        /// The field is a token column found without `token_column` ([`super::detect`]).
        detected: bool,
    },
}

impl CorpusSource {
    /// Opens `spec`, looking for hub datasets in [`gpt2::hf_cache_roots`].
    pub fn open(spec: &CorpusSpec) -> Result<Self> {
        Self::open_with_hub(spec, &gpt2::hf_cache_roots())
    }

    /// Opens `spec` with hub datasets looked for in `hub_roots`, in order.
    pub fn open_with_hub(spec: &CorpusSpec, hub_roots: &[PathBuf]) -> Result<Self> {
        let named = spec.field()?;
        let name = spec.corpus.as_str();
        let field_of = |files: &[DataFile]| match &named {
            Some(f) => Ok((f.clone(), false)),
            None => detect::default_field(name, files),
        };
        if let Some(rest) = name.strip_prefix(hub::PREFIX) {
            let dataset = HubDataset::parse(rest)?;
            let dir = dataset.locate(hub_roots)?;
            let files = hub::dataset_files(&dataset, &dir)?;
            let (field, detected) = field_of(&files)?;
            return Ok(Self::Streamed {
                dataset: name.to_string(),
                files,
                field,
                detected,
            });
        }
        let text = Field::Text(DEFAULT_TEXT_COLUMN.into());
        if name == "default" && named.as_ref().is_none_or(|f| *f == text) {
            return Ok(Self::InMemory(Corpus::load(name)?));
        }
        let path = Path::new(name);
        if !path.exists() {
            return Err(Error::Corpus {
                path: path.to_path_buf(),
                message: "no such file or directory (use `default` for the shipped corpus, \
                          hf:OWNER/NAME for a hub dataset)"
                    .into(),
            });
        }
        let files = data_files(path, |_| true)?;
        if files.is_empty() {
            return Err(Error::Corpus {
                path: path.to_path_buf(),
                message: "no data files (.txt, .jsonl, .jsonl.gz, .jsonl.zst, .parquet)".into(),
            });
        }
        let (field, detected) = field_of(&files)?;
        if field == text && files.iter().all(|f| f.kind.in_memory()) {
            return Ok(Self::InMemory(Corpus::load(name)?));
        }
        if matches!(field, Field::Tokens(_)) && files.iter().any(|f| f.kind == FileKind::Text) {
            return Err(Error::Corpus {
                path: path.to_path_buf(),
                message: "`token_column` is set but there are .txt files, which hold text".into(),
            });
        }
        Ok(Self::Streamed {
            dataset: name.to_string(),
            files,
            field,
            detected,
        })
    }

    /// The token column read because the dataset has no `text` column and none was named (see
    /// [`super::detect::TOKEN_COLUMNS`]).
    pub fn detected_token_column(&self) -> Option<&str> {
        match self {
            Self::Streamed {
                field: Field::Tokens(c),
                detected: true,
                ..
            } => Some(c),
            _ => None,
        }
    }

    /// The line a command prints when it reads a detected token column.
    pub fn detection_note(&self) -> Option<String> {
        let Self::Streamed { dataset, .. } = self else {
            return None;
        };
        self.detected_token_column().map(|c| {
            format!("corpus {dataset}: no \"{DEFAULT_TEXT_COLUMN}\" column; reading token ids from \"{c}\"")
        })
    }

    pub fn is_streamed(&self) -> bool {
        matches!(self, Self::Streamed { .. })
    }

    /// The contexts of `opts.split` as a stream; with `repeat` it starts over at the end.
    pub fn stream(&self, opts: PackOptions, repeat: bool) -> Result<Box<dyn ContextStream>> {
        match self {
            Self::InMemory(_) => Ok(Box::new(self.contexts(opts, None)?.into_stream(repeat))),
            Self::Streamed {
                dataset,
                files,
                field,
                ..
            } => {
                let reader = DocumentReader::new(dataset, files.clone(), field.clone());
                Ok(Box::new(CorpusStream::new(reader, opts, repeat)?))
            }
        }
    }

    /// The contexts of `opts.split` in memory: all of them, or the first `max_contexts` (a
    /// streamed corpus is then read only as far as it takes).
    pub fn contexts(&self, opts: PackOptions, max_contexts: Option<usize>) -> Result<Contexts> {
        let t = opts.context_len;
        match self {
            Self::InMemory(corpus) => {
                let stream = corpus
                    .split(opts.split, opts.heldout_fraction)
                    .tokenize(&opts.tokenizer)?;
                let mut contexts =
                    Contexts::pack(&stream, t, opts.prepend_bos, opts.tokenizer.bos())?;
                if let Some(m) = max_contexts {
                    contexts.tokens.truncate(m.saturating_mul(t));
                }
                Ok(contexts)
            }
            Self::Streamed { .. } => {
                let mut stream = self.stream(opts, false)?;
                let mut tokens = Vec::new();
                let cap = max_contexts.unwrap_or(usize::MAX);
                while tokens.len() / t < cap {
                    let want = (cap - tokens.len() / t).min(256);
                    match stream.next_contexts(want)? {
                        Some(batch) => tokens.extend(batch),
                        None => break,
                    }
                }
                Ok(Contexts {
                    tokens,
                    context_len: t,
                })
            }
        }
    }

    /// sha256 naming the documents of `split`: their names and texts for an in-memory corpus; the
    /// data files' names and sizes, the column and the split for a streamed one.
    pub fn fingerprint(&self, split: Split, heldout_fraction: f64) -> Result<String> {
        match self {
            Self::InMemory(corpus) => Ok(corpus.split(split, heldout_fraction).fingerprint()),
            Self::Streamed { files, field, .. } => {
                let mut h = Sha256::new();
                for f in files {
                    let size = std::fs::metadata(&f.path)
                        .map_err(|e| Error::io(&f.path, e))?
                        .len();
                    h.update((f.name.len() as u64).to_le_bytes());
                    h.update(f.name.as_bytes());
                    h.update(size.to_le_bytes());
                }
                h.update(format!("{field:?} {split:?} {heldout_fraction}").as_bytes());
                Ok(hex::encode(h.finalize()))
            }
        }
    }

    /// Documents of `split` when known without reading the corpus (in-memory corpora).
    pub fn documents(&self, split: Split, heldout_fraction: f64) -> Option<usize> {
        match self {
            Self::InMemory(c) => Some(c.split(split, heldout_fraction).documents.len()),
            Self::Streamed { .. } => None,
        }
    }
}
