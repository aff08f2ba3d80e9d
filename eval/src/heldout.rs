//! Held-out activations for the evaluation, chosen as SAELens chooses them: each context's first
//! position (BOS) and every special token (`<|endoftext|>`, GPT-2's only one) are left out, so FVU
//! and L0 measure ordinary text positions, not the attention-sink outliers there.
use crate::Result;
use activations::corpus::Contexts;
use activations::source::hook_rows;
use activations::tokenizer::END_OF_TEXT;
use candle_core::{DType, Tensor};
use gpt2::HookPoint;
use models::Model;

/// Whether a token's activations take part in FVU and L0.
pub fn is_evaluated(token: u32) -> bool {
    token != END_OF_TEXT
}

/// The first `n_tokens` evaluated rows of `contexts` at `hooks`, in context order, as [n, d] (one hook)
/// or [n, H, d]; fewer when the contexts hold fewer, None when they hold none.
pub fn heldout_rows(
    model: &Model,
    contexts: &Contexts,
    hooks: &[HookPoint],
    n_tokens: usize,
    batch_contexts: usize,
) -> Result<Option<Tensor>> {
    let t = contexts.context_len;
    let batch = batch_contexts.max(1);
    let mut parts = Vec::new();
    let mut have = 0;
    let mut next = 0;
    while have < n_tokens && next < contexts.len() {
        let b = batch.min(contexts.len() - next);
        let ids = contexts.tokens[next * t..(next + b) * t].to_vec();
        next += b;
        let tokens = Tensor::from_vec(ids, (b, t), model.device())?;
        let (rows, ids) = hook_rows(model, &tokens, hooks, true)?;
        let keep: Vec<u32> = ids
            .to_vec1::<u32>()?
            .iter()
            .enumerate()
            .filter(|(_, id)| is_evaluated(**id))
            .map(|(i, _)| i as u32)
            .take(n_tokens - have)
            .collect();
        if keep.is_empty() {
            continue;
        }
        let n = keep.len();
        have += n;
        let keep = Tensor::from_vec(keep, n, rows.device())?;
        parts.push(rows.index_select(&keep, 0)?.to_dtype(DType::F32)?);
    }
    if parts.is_empty() {
        return Ok(None);
    }
    let rows = Tensor::cat(&parts, 0)?;
    Ok(Some(if rows.dim(1)? == 1 {
        rows.squeeze(1)?
    } else {
        rows
    }))
}
