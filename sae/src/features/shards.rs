//! Dashboards of a run trained on activation shards, from the rows the shards hold: no model forward.
//! `extract` stores a context's kept positions as consecutive rows, contexts in corpus order
//! (`context_len − drop_bos` rows each; activations/src/shards/extract.rs), so the first rows rebuild
//! the first contexts, their activations used as stored.
use super::{build, ContextActivations, FeatureOptions, HeldoutContexts, InferenceSae};
use crate::{Error, Result};
use activations::{
    corpus::Contexts, shards::Manifest, tokenizer::END_OF_TEXT, Gpt2Tokenizer, ReaderOptions,
    ShardReader,
};
use candle_core::{DType, Device, Tensor};
use eval::report::features::FeatureDashboards;
use models::Model;
use std::path::Path;

/// Rows per context in `m`'s shards.
fn rows_per_context(m: &Manifest) -> usize {
    (m.context_len - usize::from(m.drop_bos)).max(1)
}

/// Complete contexts the shards of `m` hold.
pub fn complete_contexts(m: &Manifest) -> usize {
    m.total_tokens / rows_per_context(m)
}

/// Held-out contexts rebuilt from shards: token ids, BOS first as the model saw them (with `drop_bos`
/// the first position's row was not stored: `<|endoftext|>` stands there, never encoded), and the
/// stored rows [contexts · context_len, hooks · d_model] (zeros at a dropped first position).
pub struct StoredContexts {
    pub contexts: Contexts,
    rows: Tensor,
}

impl ContextActivations for StoredContexts {
    fn of(&self, contexts: &[usize], _tokens: &Tensor) -> Result<Tensor> {
        let t = self.contexts.context_len;
        let idx: Vec<u32> = contexts
            .iter()
            .flat_map(|&c| (c * t..(c + 1) * t).map(|r| r as u32))
            .collect();
        let n = idx.len();
        let idx = Tensor::from_vec(idx, n, self.rows.device())?;
        Ok(self.rows.index_select(&idx, 0)?)
    }
}

impl StoredContexts {
    /// The first `max_contexts` complete contexts of the shards in `dir` (host memory: their rows in f32).
    pub fn read(dir: &Path, max_contexts: usize) -> Result<Self> {
        let reader = ShardReader::open(
            dir,
            ReaderOptions {
                buffer_bytes: 0,
                prefetch: 0,
                mix_shards: 1,
                ..ReaderOptions::default()
            },
        )?;
        let m = reader.manifest();
        let kept = rows_per_context(m);
        let n_contexts = complete_contexts(m).min(max_contexts);
        if n_contexts == 0 {
            return Err(Error::Data(format!(
                "{}: the shards hold {} rows, fewer than one context of {kept}",
                dir.display(),
                m.total_tokens
            )));
        }
        let want = n_contexts * kept;
        let d_in = m.hook_points.len() * m.d_model;
        let (mut acts, mut ids) = (Vec::new(), Vec::with_capacity(want));
        for shard in 0..m.shards.len() {
            if ids.len() >= want {
                break;
            }
            let (a, t) = reader.load_shard(shard)?;
            let take = (want - ids.len()).min(t.dim(0)?);
            acts.push(
                a.narrow(0, 0, take)?
                    .to_dtype(DType::F32)?
                    .reshape((take, d_in))?,
            );
            ids.extend(t.narrow(0, 0, take)?.to_vec1::<u32>()?);
        }
        let acts = Tensor::cat(&acts, 0)?;
        let t = m.context_len;
        let (tokens, rows) = if m.drop_bos {
            let tokens: Vec<u32> = ids
                .chunks_exact(kept)
                .flat_map(|c| std::iter::once(END_OF_TEXT).chain(c.iter().copied()))
                .collect();
            let first = Tensor::zeros((n_contexts, 1, d_in), DType::F32, &Device::Cpu)?;
            let rows = Tensor::cat(&[first, acts.reshape((n_contexts, kept, d_in))?], 1)?;
            (tokens, rows.reshape((n_contexts * t, d_in))?)
        } else {
            (ids, acts)
        };
        Ok(Self {
            contexts: Contexts {
                tokens,
                context_len: t,
            },
            rows,
        })
    }
}

/// The model `m` names, for its unembedding; None (said on stderr) when it does not load here.
fn model_of(m: &Manifest, device: &Device) -> Option<Model> {
    let loaded = runtime::device::parse_dtype("model_dtype", &m.model_dtype)
        .map_err(activations::Error::from)
        .and_then(|dtype| activations::models::load_model(&m.model, dtype, device));
    match loaded {
        Ok(model) => Some(model),
        Err(e) => {
            eprintln!(
                "note: feature dashboards without output tokens: the shards' model `{}` does not \
                 load ({e})",
                m.model
            );
            None
        }
    }
}

/// The dashboards of `sae` on the contexts the shards in `dir` hold.
pub fn build_from_shards(
    sae: &InferenceSae,
    dir: &Path,
    opts: &FeatureOptions,
    device: &Device,
) -> Result<FeatureDashboards> {
    let m = Manifest::read(dir)?;
    check_fits(sae, &m, dir)?;
    let t = m.context_len;
    let stored = StoredContexts::read(dir, opts.max_tokens.div_ceil(t).max(1))?;
    let model = model_of(&m, device);
    let data = HeldoutContexts {
        activations: &stored,
        tokens: &stored.contexts.tokens,
        context_len: t,
        model: model.as_ref(),
    };
    let names: Vec<String> = m.hook_points.iter().map(|h| h.to_string()).collect();
    build(
        sae,
        &data,
        &Gpt2Tokenizer::new()?,
        &names,
        &super::Unembedding::of_model(data.model),
        opts,
    )
}

/// The SAE reads rows of the width the shards store.
fn check_fits(sae: &InferenceSae, m: &Manifest, dir: &Path) -> Result<()> {
    let stored = m.hook_points.len() * m.d_model;
    if sae.layers * sae.d_model != stored {
        return Err(Error::Shape(format!(
            "{}: the shards store {} hook point(s) of {} values, the SAE reads {} of {}",
            dir.display(),
            m.hook_points.len(),
            m.d_model,
            sae.layers,
            sae.d_model
        )));
    }
    Ok(())
}
