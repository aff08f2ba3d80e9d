//! The GPT-2 byte-level BPE tokenizer, embedded in the binary.
use crate::error::{Error, Result};

/// `<|endoftext|>`: GPT-2's document separator, also used as BOS.
pub const END_OF_TEXT: u32 = 50256;

const TOKENIZER_JSON: &[u8] = include_bytes!("../assets/gpt2-tokenizer.json");

pub struct Gpt2Tokenizer {
    inner: tokenizers::Tokenizer,
}

impl Gpt2Tokenizer {
    /// The GPT-2 tokenizer shipped with the crate (50257 tokens).
    pub fn new() -> Result<Self> {
        let inner = tokenizers::Tokenizer::from_bytes(TOKENIZER_JSON)
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        Ok(Self { inner })
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
