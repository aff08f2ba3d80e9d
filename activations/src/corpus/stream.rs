//! Packed contexts delivered a batch at a time, from memory or from a streamed corpus, in bounded
//! memory: documents are read a batch at a time, tokenized in parallel, and packed in order.
use super::files::{DocumentReader, Payload, RawDocument};
use super::{Contexts, Split};
use crate::error::{Error, Result};
use crate::tokenizer::Tokenizer;
use rayon::prelude::*;
use sha2::{Digest, Sha256};

/// Fixed-length token contexts, `n` at a time.
pub trait ContextStream: Send {
    /// Tokens per context.
    fn context_len(&self) -> usize;

    /// The next `k` contexts (1 ≤ k ≤ n), row-major: `k × context_len` tokens. None at the end; a
    /// repeating stream starts over instead, and always returns `n`.
    fn next_contexts(&mut self, n: usize) -> Result<Option<Vec<u32>>>;
}

/// In-memory contexts as a stream, in order.
#[derive(Debug, Clone)]
pub struct ContextsStream {
    contexts: Contexts,
    next: usize,
    repeat: bool,
}

impl Contexts {
    /// These contexts as a [`ContextStream`]; with `repeat` it wraps around at the end.
    pub fn into_stream(self, repeat: bool) -> ContextsStream {
        ContextsStream {
            contexts: self,
            next: 0,
            repeat,
        }
    }
}

impl ContextStream for ContextsStream {
    fn context_len(&self) -> usize {
        self.contexts.context_len
    }

    fn next_contexts(&mut self, n: usize) -> Result<Option<Vec<u32>>> {
        let len = self.contexts.len();
        if n == 0 || len == 0 || (!self.repeat && self.next >= len) {
            return Ok(None);
        }
        let t = self.contexts.context_len;
        let mut out = Vec::with_capacity(n * t);
        while out.len() < n * t {
            if self.next == len {
                if !self.repeat {
                    break;
                }
                self.next = 0;
            }
            let take = (n - out.len() / t).min(len - self.next);
            out.extend_from_slice(&self.contexts.tokens[self.next * t..(self.next + take) * t]);
            self.next += take;
        }
        Ok(Some(out))
    }
}

/// How documents become contexts.
#[derive(Debug, Clone)]
pub struct PackOptions {
    pub split: Split,
    /// Fraction of the documents held out (see [`is_heldout`] for streamed corpora).
    pub heldout_fraction: f64,
    pub context_len: usize,
    /// Start every context with the tokenizer's BOS.
    pub prepend_bos: bool,
    /// What text becomes tokens with, and the BOS (GPT-2's: [`Tokenizer::new`]; a model's:
    /// [`Tokenizer::for_model`]).
    pub tokenizer: Tokenizer,
}

impl PackOptions {
    fn body(&self) -> Result<usize> {
        let body = self
            .context_len
            .saturating_sub(usize::from(self.prepend_bos));
        if body == 0 {
            return Err(Error::config(
                "data.context",
                format!("{} leaves no room for text", self.context_len),
            ));
        }
        Ok(body)
    }
}

/// Whether the document at `row` of the file named `file` is held out: a hash of the two, read as
/// a fraction of 2^64, below `fraction`. It depends on nothing else (not on threads, batches or
/// other documents), so the split is reproducible and train and held-out never share a document.
pub fn is_heldout(file: &str, row: u64, fraction: f64) -> bool {
    let mut h = Sha256::new();
    h.update(file.as_bytes());
    h.update([0]);
    h.update(row.to_le_bytes());
    let digest = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_le_bytes(first) as f64) / 2f64.powi(64) < fraction
}

/// Token stream → contexts, exactly as [`Contexts::pack`] cuts the concatenated stream.
struct Packer {
    context_len: usize,
    prepend_bos: bool,
    bos: u32,
    body: usize,
    pending: Vec<u32>,
    ready: Vec<u32>,
    emitted: u64,
}

impl Packer {
    fn push_stream(&mut self, tokens: &[u32]) {
        self.pending.extend_from_slice(tokens);
        let mut start = 0;
        while self.pending.len() - start >= self.body {
            if self.prepend_bos {
                self.ready.push(self.bos);
            }
            self.ready
                .extend_from_slice(&self.pending[start..start + self.body]);
            start += self.body;
            self.emitted += 1;
        }
        self.pending.drain(..start);
    }

    /// A pretokenized row: a whole context as it is when it has the context's length, else part of
    /// the stream.
    fn push_row(&mut self, ids: &[u32]) {
        if ids.len() == self.context_len {
            self.ready.extend_from_slice(ids);
            self.emitted += 1;
        } else {
            self.push_stream(ids);
        }
    }
}

/// Contexts of a streamed corpus: documents of one split, read a batch at a time (a parquet row
/// batch, a thousand JSONL lines), text tokenized in parallel and followed by `<|endoftext|>`,
/// token-id rows used as they are, packed in document order.
pub struct CorpusStream {
    reader: DocumentReader,
    tokenizer: Tokenizer,
    opts: PackOptions,
    repeat: bool,
    packer: Packer,
    emitted_at_pass_start: u64,
    finished: bool,
}

impl CorpusStream {
    pub fn new(reader: DocumentReader, opts: PackOptions, repeat: bool) -> Result<Self> {
        let body = opts.body()?;
        let packer = Packer {
            context_len: opts.context_len,
            prepend_bos: opts.prepend_bos,
            bos: opts.tokenizer.bos(),
            body,
            pending: Vec::new(),
            ready: Vec::new(),
            emitted: 0,
        };
        Ok(Self {
            reader,
            tokenizer: opts.tokenizer.clone(),
            opts,
            repeat,
            packer,
            emitted_at_pass_start: 0,
            finished: false,
        })
    }

    fn wanted(&self, d: &RawDocument) -> bool {
        match self.opts.split {
            Split::All => true,
            split => {
                let name = &self.reader.files()[d.file].name;
                is_heldout(name, d.row, self.opts.heldout_fraction) == (split == Split::Heldout)
            }
        }
    }

    fn take(&mut self, docs: Vec<RawDocument>) -> Result<()> {
        let docs: Vec<RawDocument> = docs.into_iter().filter(|d| self.wanted(d)).collect();
        let tokenizer = &self.tokenizer;
        let tokenized: Vec<Result<(bool, Vec<u32>)>> = docs
            .into_par_iter()
            .map(|d| match d.payload {
                Payload::Text(t) => tokenizer.encode(&t).map(|ids| (true, ids)),
                Payload::Tokens(ids) => Ok((false, ids)),
            })
            .collect();
        for doc in tokenized {
            let (text, ids) = doc?;
            if text {
                self.packer.push_stream(&ids);
                self.packer.push_stream(&[self.tokenizer.bos()]);
            } else {
                self.packer.push_row(&ids);
            }
        }
        Ok(())
    }
}

impl ContextStream for CorpusStream {
    fn context_len(&self) -> usize {
        self.opts.context_len
    }

    fn next_contexts(&mut self, n: usize) -> Result<Option<Vec<u32>>> {
        let t = self.opts.context_len;
        while !self.finished && self.packer.ready.len() < n * t {
            match self.reader.next_batch()? {
                Some(docs) => self.take(docs)?,
                None if self.repeat => {
                    if self.packer.emitted == self.emitted_at_pass_start {
                        return Err(Error::config(
                            "data.corpus",
                            format!(
                                "the {:?} split gives no complete context of {t} tokens",
                                self.opts.split
                            ),
                        ));
                    }
                    // Every pass is the same: the last partial context is dropped.
                    self.packer.pending.clear();
                    self.reader.restart();
                    self.emitted_at_pass_start = self.packer.emitted;
                }
                None => self.finished = true,
            }
        }
        let k = n.min(self.packer.ready.len() / t);
        if k == 0 {
            return Ok(None);
        }
        let rest = self.packer.ready.split_off(k * t);
        Ok(Some(std::mem::replace(&mut self.packer.ready, rest)))
    }
}
