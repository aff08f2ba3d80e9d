//! Corpora: documents from the shipped Shakespeare, .txt, JSONL (plain, gzip, zstd), parquet files,
//! directories of them and Hugging Face hub datasets; text tokenized (or token ids taken as they are),
//! joined by `<|endoftext|>` and packed into fixed-length contexts, in memory or streamed.
//!
//! Every command opens its corpus with [`CorpusSource::open`]; see `docs/corpora.md`.
mod detect;
mod files;
mod hub;
mod open;
mod parquet;
mod shakespeare;
mod stream;

pub use detect::TOKEN_COLUMNS;

/// The share of a corpus' documents held out from training, unless `data.held_out_fraction` says
/// otherwise: the same in every command, so that train-sae, extract and finetune split a corpus alike.
pub const DEFAULT_HELD_OUT_FRACTION: f64 = 0.1;

pub use files::{Compression, DataFile, Field, FileKind};
pub use hub::HubDataset;
pub use open::{CorpusSource, CorpusSpec, DEFAULT_TEXT_COLUMN};
pub use stream::{is_heldout, ContextStream, ContextsStream, CorpusStream, PackOptions};

use crate::error::{Error, Result};
use crate::tokenizer::{Tokenizer, END_OF_TEXT};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    /// Where the document came from (file name, `file:line` for JSONL); also decides its split.
    pub name: String,
    pub text: String,
}

#[derive(Debug, Clone, Default)]
pub struct Corpus {
    pub documents: Vec<Document>,
}

/// Which documents of a corpus to use.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    All,
    Train,
    Heldout,
}

/// A token id read from a dataset, checked against GPT-2's vocabulary.
pub(crate) fn token_id(id: i64) -> std::result::Result<u32, String> {
    let vocab = i64::from(END_OF_TEXT) + 1;
    if (0..vocab).contains(&id) {
        Ok(id as u32)
    } else {
        Err(format!(
            "token id {id} is outside GPT-2's vocabulary (0..{vocab})"
        ))
    }
}

/// The shipped default corpus (15 works of Shakespeare, 1.9 MB), one document per work.
pub fn default_corpus() -> Corpus {
    Corpus {
        documents: shakespeare::WORKS
            .iter()
            .map(|(name, text)| Document {
                name: (*name).to_string(),
                text: (*text).to_string(),
            })
            .collect(),
    }
}

impl Corpus {
    /// `"default"` (the shipped corpus), a .txt file (one document), a .jsonl file (one document
    /// per line, from its `"text"` field), or a directory (its .txt and .jsonl files, recursively,
    /// in path order). Commands open corpora with [`CorpusSource::open`], which reads these so.
    pub(crate) fn load(spec: &str) -> Result<Self> {
        if spec == "default" {
            return Ok(default_corpus());
        }
        let path = Path::new(spec);
        let mut documents = Vec::new();
        if path.is_dir() {
            for file in text_files_under(path)? {
                read_file_into(&file, &mut documents)?;
            }
        } else if path.is_file() {
            read_file_into(path, &mut documents)?;
        } else {
            return Err(Error::Corpus {
                path: path.to_path_buf(),
                message: "no such file or directory (use `default` for the shipped corpus)".into(),
            });
        }
        if documents.is_empty() {
            return Err(Error::Corpus {
                path: path.to_path_buf(),
                message: "no documents (.txt files or .jsonl lines with a \"text\" field)".into(),
            });
        }
        Ok(Self { documents })
    }

    /// The documents of `split`: a deterministic `heldout_fraction` of the documents (at least
    /// one when the fraction is positive and there are two or more), chosen by a hash of their
    /// names, so train and held-out never share a document.
    pub fn split(&self, split: Split, heldout_fraction: f64) -> Corpus {
        if split == Split::All {
            return self.clone();
        }
        let n = self.documents.len();
        let mut n_held = (heldout_fraction * n as f64).round() as usize;
        if heldout_fraction > 0.0 && n >= 2 {
            n_held = n_held.clamp(1, n - 1);
        }
        let mut order: Vec<(String, usize)> = self
            .documents
            .iter()
            .enumerate()
            .map(|(i, d)| (hex::encode(Sha256::digest(d.name.as_bytes())), i))
            .collect();
        order.sort();
        let held: std::collections::HashSet<usize> =
            order.iter().take(n_held).map(|(_, i)| *i).collect();
        let documents = self
            .documents
            .iter()
            .enumerate()
            .filter(|(i, _)| held.contains(i) == (split == Split::Heldout))
            .map(|(_, d)| d.clone())
            .collect();
        Corpus { documents }
    }

    /// sha256 over the documents' names and texts, in order.
    pub fn fingerprint(&self) -> String {
        let mut h = Sha256::new();
        for d in &self.documents {
            h.update((d.name.len() as u64).to_le_bytes());
            h.update(d.name.as_bytes());
            h.update((d.text.len() as u64).to_le_bytes());
            h.update(d.text.as_bytes());
        }
        hex::encode(h.finalize())
    }

    /// All documents tokenized, each followed by the tokenizer's BOS (GPT-2's `<|endoftext|>`).
    pub fn tokenize(&self, tokenizer: &Tokenizer) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        for d in &self.documents {
            out.extend(tokenizer.encode(&d.text)?);
            out.push(tokenizer.bos());
        }
        Ok(out)
    }
}

/// The text and JSONL files under `dir`, sorted by path.
fn text_files_under(dir: &Path) -> Result<Vec<PathBuf>> {
    Ok(files::files_under(dir)?
        .into_iter()
        .filter(|p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("txt" | "jsonl")
            )
        })
        .collect())
}

fn read_file_into(path: &Path, documents: &mut Vec<Document>) -> Result<()> {
    if FileKind::of(path).is_some_and(|k| !k.in_memory()) {
        return Err(Error::Corpus {
            path: path.to_path_buf(),
            message: "parquet and compressed JSONL are streamed: open them with CorpusSource::open"
                .into(),
        });
    }
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let name = path.display().to_string();
    if path.extension().and_then(|e| e.to_str()) != Some("jsonl") {
        documents.push(Document { name, text });
        return Ok(());
    }
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |message: String| Error::Corpus {
            path: path.to_path_buf(),
            message: format!("line {}: {message}", i + 1),
        };
        let value: serde_json::Value =
            serde_json::from_str(line).map_err(|e| bad(format!("invalid JSON: {e}")))?;
        let text = value
            .get("text")
            .and_then(|t| t.as_str())
            .ok_or_else(|| bad("no string field \"text\"".into()))?;
        documents.push(Document {
            name: format!("{name}:{}", i + 1),
            text: text.to_string(),
        });
    }
    Ok(())
}

/// Token contexts of one fixed length, stored flat.
#[derive(Debug, Clone, PartialEq)]
pub struct Contexts {
    pub tokens: Vec<u32>,
    pub context_len: usize,
}

impl Contexts {
    /// Cuts a token stream into contexts of `context_len` tokens; with `prepend_bos` each context
    /// starts with `bos` followed by `context_len - 1` stream tokens. A last partial context is
    /// dropped.
    pub fn pack(stream: &[u32], context_len: usize, prepend_bos: bool, bos: u32) -> Result<Self> {
        let body = context_len.saturating_sub(usize::from(prepend_bos));
        if body == 0 {
            return Err(Error::config(
                "corpus.context_len",
                format!("{context_len} leaves no room for text"),
            ));
        }
        let mut tokens = Vec::with_capacity(stream.len() / body * context_len);
        for chunk in stream.chunks_exact(body) {
            if prepend_bos {
                tokens.push(bos);
            }
            tokens.extend_from_slice(chunk);
        }
        Ok(Self {
            tokens,
            context_len,
        })
    }

    pub fn len(&self) -> usize {
        self.tokens.len() / self.context_len
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    pub fn context(&self, i: usize) -> &[u32] {
        &self.tokens[i * self.context_len..(i + 1) * self.context_len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_with_and_without_bos() {
        let stream: Vec<u32> = (0..10).collect();
        let c = Contexts::pack(&stream, 4, true, END_OF_TEXT).unwrap();
        assert_eq!(c.len(), 3);
        assert_eq!(c.context(1), &[END_OF_TEXT, 3, 4, 5]);
        let c = Contexts::pack(&stream, 4, false, END_OF_TEXT).unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(c.context(1), &[4, 5, 6, 7]);
        assert!(Contexts::pack(&stream, 1, true, END_OF_TEXT).is_err());
    }

    #[test]
    fn split_is_disjoint_deterministic_and_covering() {
        let c = default_corpus();
        let train = c.split(Split::Train, 0.1);
        let held = c.split(Split::Heldout, 0.1);
        assert_eq!(held.documents.len(), 2);
        assert_eq!(
            train.documents.len() + held.documents.len(),
            c.documents.len()
        );
        assert!(held.documents.iter().all(|d| !train.documents.contains(d)));
        assert_eq!(
            held.fingerprint(),
            c.split(Split::Heldout, 0.1).fingerprint()
        );
    }

    #[test]
    fn reads_jsonl_and_names_bad_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.jsonl");
        std::fs::write(&p, "{\"text\": \"one\"}\n\n{\"text\": \"two\"}\n").unwrap();
        let c = Corpus::load(p.to_str().unwrap()).unwrap();
        assert_eq!(c.documents.len(), 2);
        assert_eq!(c.documents[1].text, "two");
        std::fs::write(dir.path().join("b.jsonl"), "{\"txt\": 1}\n").unwrap();
        let err = Corpus::load(dir.path().to_str().unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("b.jsonl") && err.contains("line 1"), "{err}");
        assert!(Corpus::load("/no/such/corpus").is_err());
    }
}
