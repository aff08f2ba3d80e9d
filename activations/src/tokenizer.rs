//! Tokenizers: GPT-2's byte-level BPE, embedded in the binary, or a model's own `tokenizer.json`,
//! each with the token that starts contexts and separates documents.
use crate::error::{Error, Result};
use std::path::Path;
use std::sync::Arc;

/// `<|endoftext|>`: GPT-2's document separator, also used as BOS.
pub const END_OF_TEXT: u32 = 50256;

const TOKENIZER_JSON: &[u8] = include_bytes!("../assets/gpt2-tokenizer.json");

/// The name most of the code knows the tokenizer by: [`Tokenizer::new`] is GPT-2's.
pub type Gpt2Tokenizer = Tokenizer;

/// A tokenizer and its BOS: the token prepended to contexts and put between documents.
#[derive(Clone)]
pub struct Tokenizer {
    inner: Arc<tokenizers::Tokenizer>,
    bos: u32,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("bos", &self.bos)
            .finish()
    }
}

impl Tokenizer {
    /// The GPT-2 tokenizer shipped with the crate (50257 tokens; BOS `<|endoftext|>`).
    pub fn new() -> Result<Self> {
        let inner = tokenizers::Tokenizer::from_bytes(TOKENIZER_JSON)
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        Ok(Self {
            inner: Arc::new(inner),
            bos: END_OF_TEXT,
        })
    }

    /// The tokenizer of the model `spec` names (see [`crate::models::load_model`]): GPT-2's for
    /// GPT-2 models, `tiny` and every `random:` shape; else the `tokenizer.json` beside the model's
    /// `config.json`, with BOS `bos_token_id` (`eos_token_id` when it has none: Qwen's
    /// `<|endoftext|>`), as SAELens prepends it.
    pub fn for_model(spec: &str) -> Result<Self> {
        if spec == "tiny" || spec == "tiny-random" || spec.starts_with("random:") {
            return Self::new();
        }
        let files = models::locate(spec)?;
        if models::read_model_type(&files.config)? == "gpt2" {
            return Self::new();
        }
        let dir = files.config.parent().unwrap_or(Path::new("."));
        let path = dir.join("tokenizer.json");
        if !path.is_file() {
            return Err(Error::Tokenizer(format!(
                "{}: no tokenizer.json beside the model's config.json (the tokenizer is read \
                 from tokenizer.json only)",
                dir.display()
            )));
        }
        let inner = tokenizers::Tokenizer::from_file(&path)
            .map_err(|e| Error::Tokenizer(format!("{}: {e}", path.display())))?;
        let bos = bos_of(&files.config)?;
        Ok(Self {
            inner: Arc::new(inner),
            bos,
        })
    }

    /// The token prepended to contexts and put after each document.
    pub fn bos(&self) -> u32 {
        self.bos
    }

    /// Token ids of `text`; `<|endoftext|>` in the text becomes [`END_OF_TEXT`].
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode_fast(text, false)
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, false)
            .map_err(|e| Error::Tokenizer(e.to_string()))
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }
}

/// `bos_token_id` (else `eos_token_id`) of the `config.json` at `path`.
fn bos_of(path: &Path) -> Result<u32> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::Tokenizer(format!("{}: {e}", path.display())))?;
    let id = |key: &str| {
        json.get(key).and_then(|v| match v {
            serde_json::Value::Array(a) => a.first().and_then(|x| x.as_u64()),
            other => other.as_u64(),
        })
    };
    id("bos_token_id")
        .or_else(|| id("eos_token_id"))
        .map(|id| id as u32)
        .ok_or_else(|| {
            Error::Tokenizer(format!(
                "{}: neither bos_token_id nor eos_token_id names the token that starts a context",
                path.display()
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_like_gpt2() {
        let tok = Gpt2Tokenizer::new().unwrap();
        assert_eq!(
            tok.encode("Hello world<|endoftext|>").unwrap(),
            vec![15496, 995, END_OF_TEXT]
        );
        assert_eq!(tok.vocab_size(), 50257);
        let text = " To be, or not to be: that is the question.";
        assert_eq!(tok.decode(&tok.encode(text).unwrap()).unwrap(), text);
    }
}
