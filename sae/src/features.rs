//! Feature dashboards (`RUN/features.json`, docs/features.md): the SAE as saved (SAELens' JumpReLU
//! inference) encodes held-out contexts streamed through the model; every latent's density is counted
//! and its top-activating contexts kept in a bounded heap. A sample of latents across the density range,
//! and any latent asked for by index, then gets a second pass ([`sampling`]: activation histogram,
//! contexts sampled per activation interval, top windows) and its output-token effects
//! ([`output_tokens`]).
use crate::checkpoint::{fold_scales, read_saelens, Exported};
use crate::config::{Arch, Config, DataConfig};
use crate::{model::Sae, Error, Result};
use activations::corpus::{Contexts, CorpusSource, Split};
use activations::{tokenizer::END_OF_TEXT, Gpt2Tokenizer};
use candle_core::{DType, Device, Tensor};
use eval::report::features::{
    DensityHistogram, Example, FeatureDashboards, LatentDashboard, QuantileGroup,
};
use gpt2::HookPoint;
use models::Model;
pub use output_tokens::Unembedding;
use output_tokens::{output_effects, OutputEffects};
use sampling::Window;
use std::cmp::{Ordering, Reverse};
use std::{collections::BinaryHeap, path::Path};

mod output_tokens;
mod plan;
mod sampling;
mod shards;
pub use plan::DashboardPlan;
pub use shards::{build_from_shards, StoredContexts};

/// How many latents, examples and tokens a dashboard build takes.
#[derive(Clone, Debug, PartialEq)]
pub struct FeatureOptions {
    /// Latents sampled across the density range (the densest and the rarest alive among them).
    pub latents: usize,
    /// Top-activating contexts kept per latent.
    pub examples: usize,
    /// Tokens shown before and after the strongest activation of a context.
    pub before: usize,
    pub after: usize,
    /// Held-out tokens encoded at most.
    pub max_tokens: usize,
    /// Histogram bins per decade of density.
    pub bins_per_decade: usize,
    /// Latents whose dashboards are built in addition to the sample.
    pub requested: Vec<usize>,
    /// Equal-width intervals of a latent's activation range that contexts are sampled from, and the
    /// contexts kept per interval.
    pub quantile_bins: usize,
    pub quantile_examples: usize,
    /// Bins of the per-latent activation and logit-effect histograms.
    pub histogram_bins: usize,
    /// Promoted and suppressed output tokens kept per latent.
    pub output_tokens: usize,
}

impl Default for FeatureOptions {
    fn default() -> Self {
        Self {
            latents: 64,
            examples: 10,
            before: 24,
            after: 6,
            max_tokens: 1 << 15,
            bins_per_decade: 4,
            requested: Vec::new(),
            quantile_bins: 10,
            quantile_examples: 5,
            histogram_bins: 32,
            output_tokens: 10,
        }
    }
}

/// The SAE at inference, in the space of the raw activations: `acts = pre · [pre > θ]` with
/// `pre = ReLU((x − b_dec)·W_enc + b_enc)`, as SAELens' JumpReLU computes it from the saved weights.
pub struct InferenceSae {
    pub arch: Arch,
    pub n: usize,
    pub layers: usize,
    pub d_model: usize,
    /// Matryoshka group sizes (empty otherwise).
    pub groups: Vec<usize>,
    pub weights: Exported,
}

impl InferenceSae {
    /// From a trained SAE: the input scales folded in, the batch selection as its threshold.
    pub fn from_trained(sae: &Sae, threshold: f64, scales: &[f64]) -> Result<Self> {
        let s = &sae.shape;
        let w = fold_scales(sae, threshold, scales)?;
        // Contiguous copies: W_enc comes as a transposed view, and columns are selected from it.
        Ok(Self {
            arch: s.arch,
            n: s.n,
            layers: s.layers,
            d_model: s.d_model,
            groups: s.groups.clone(),
            weights: Exported {
                w_enc: w.w_enc.contiguous()?,
                b_enc: w.b_enc.contiguous()?,
                w_dec: w.w_dec.contiguous()?,
                b_dec: w.b_dec.contiguous()?,
                threshold: w.threshold.contiguous()?,
            },
        })
    }

    /// From an SAE saved in SAELens' layout (`RUN/sae/` or a checkpoint folder).
    /// A run's `RUN/sae/` names its one SAE folder.
    pub fn from_saelens(dir: &Path, device: &Device) -> Result<Self> {
        let dir = &crate::hub::find_sae(dir)?;
        let (cfg, tensors) = read_saelens(dir)?;
        let bad = |msg: String| Error::Checkpoint {
            path: dir.to_path_buf(),
            msg,
        };
        let get = |name: &str| -> Result<Tensor> {
            Ok(tensors
                .get(name)
                .ok_or_else(|| bad(format!("sae_weights.safetensors lacks `{name}`")))?
                .to_dtype(DType::F32)?
                .to_device(device)?)
        };
        let field = |key: &str| -> Result<usize> {
            cfg.pointer(key)
                .and_then(|v| v.as_u64())
                .map(|v| v as usize)
                .ok_or_else(|| bad(format!("cfg.json lacks the number `{key}`")))
        };
        let (d_model, n) = (field("/d_in")?, field("/d_sae")?);
        let layers = field("/sparsetrain/layers").unwrap_or(1);
        let arch = match cfg
            .pointer("/sparsetrain/trained_as")
            .and_then(|v| v.as_str())
        {
            Some("matryoshka_batchtopk") => Arch::Matryoshka,
            Some("batchtopk_crosscoder") => Arch::Crosscoder,
            _ => Arch::Batchtopk,
        };
        let groups = cfg
            .pointer("/sparsetrain/group_sizes")
            .and_then(|v| v.as_array())
            .map(|a| a.iter().filter_map(|g| g.as_u64()).map(|g| g as usize))
            .into_iter()
            .flatten()
            .collect();
        let d_in = layers * d_model;
        let weights = Exported {
            w_enc: get("W_enc")?.reshape((d_in, n))?,
            b_enc: get("b_enc")?.reshape(n)?,
            w_dec: get("W_dec")?.reshape((n, d_in))?,
            b_dec: get("b_dec")?.reshape(d_in)?,
            threshold: get("threshold")?.reshape(n)?,
        };
        Ok(Self {
            arch,
            n,
            layers,
            d_model,
            groups,
            weights,
        })
    }

    /// Activations [rows, n] of raw inputs [rows, layers·d_model].
    pub fn encode(&self, x: &Tensor) -> Result<Tensor> {
        let w = &self.weights;
        self.encode_with(x, &w.w_enc, &w.b_enc, &w.threshold)
    }

    fn encode_with(
        &self,
        x: &Tensor,
        w_enc: &Tensor,
        b_enc: &Tensor,
        thr: &Tensor,
    ) -> Result<Tensor> {
        let pre = x
            .broadcast_sub(&self.weights.b_dec)?
            .matmul(w_enc)?
            .broadcast_add(b_enc)?
            .relu()?;
        let keep = pre.broadcast_gt(thr)?.to_dtype(DType::F32)?;
        Ok((pre * keep)?)
    }

    /// The decoder row's L2 norm at each layer, [n][layers].
    fn decoder_norms(&self) -> Result<Vec<Vec<f64>>> {
        let w = self
            .weights
            .w_dec
            .reshape((self.n, self.layers, self.d_model))?;
        Ok(w.sqr()?
            .sum(2)?
            .sqrt()?
            .to_dtype(DType::F64)?
            .to_device(&Device::Cpu)?
            .to_vec2()?)
    }

    /// The Matryoshka group of each latent.
    fn group_of(&self, latent: usize) -> Option<usize> {
        if self.arch != Arch::Matryoshka {
            return None;
        }
        let mut end = 0;
        self.groups.iter().position(|g| {
            end += g;
            latent < end
        })
    }

    fn arch_name(&self) -> &'static str {
        match self.arch {
            Arch::Batchtopk => "batchtopk",
            Arch::Matryoshka => "matryoshka",
            Arch::Crosscoder => "crosscoder",
        }
    }
}

/// Raw activations [contexts.len()·T, layers·d_model] (hook points side by side) of held-out
/// contexts, given by their indices and their token ids [B, T]: a model's forward to its hook points,
/// or rows read back from activation shards.
pub trait ContextActivations {
    fn of(&self, contexts: &[usize], tokens: &Tensor) -> Result<Tensor>;
}

/// A function of the token ids alone (a model's forward).
impl<F: Fn(&Tensor) -> Result<Tensor>> ContextActivations for F {
    fn of(&self, _contexts: &[usize], tokens: &Tensor) -> Result<Tensor> {
        self(tokens)
    }
}

pub type Activations<'a> = &'a dyn ContextActivations;

/// Held-out contexts and what turns them into the SAE's inputs.
pub struct HeldoutContexts<'a> {
    pub activations: Activations<'a>,
    /// Token ids [contexts · context_len], each context starting with BOS.
    pub tokens: &'a [u32],
    pub context_len: usize,
    /// The model the activations are of, when it is at hand (its unembedding reads the decoder
    /// directions as output tokens).
    pub model: Option<&'a Model>,
}

impl HeldoutContexts<'_> {
    fn len(&self) -> usize {
        self.tokens.len() / self.context_len.max(1)
    }

    fn context(&self, i: usize) -> &[u32] {
        &self.tokens[i * self.context_len..(i + 1) * self.context_len]
    }

    /// Raw activations [contexts.len() · T, d_in] of the listed contexts.
    fn activations_of(&self, contexts: &[usize], device: &Device) -> Result<Tensor> {
        let ids: Vec<u32> = contexts
            .iter()
            .flat_map(|&c| self.context(c).iter().copied())
            .collect();
        let tokens = Tensor::from_vec(ids, (contexts.len(), self.context_len), device)?;
        let x = self.activations.of(contexts, &tokens)?;
        let rows = contexts.len() * self.context_len;
        if x.dims2()?.0 != rows {
            return Err(Error::Shape(format!(
                "activations of {rows} tokens came back as {:?}",
                x.dims()
            )));
        }
        Ok(x.to_dtype(DType::F32)?.to_device(device)?)
    }
}

/// Raw activations of `tokens` [B, T] at `hooks`, as [B·T, hooks·d_model].
pub fn model_activations(model: &Model, hooks: &[HookPoint], tokens: &Tensor) -> Result<Tensor> {
    let (b, t) = tokens.dims2()?;
    let acts = model.forward_hooks(tokens, hooks)?;
    let stacked = Tensor::cat(&acts, 2)?;
    Ok(stacked.reshape((b * t, stacked.dim(2)?))?)
}

/// Positions not encoded: the BOS that starts each context and any `<|endoftext|>`.
fn encoded(position: usize, token: u32) -> bool {
    position > 0 && token != END_OF_TEXT
}

/// A context's strongest activation of one latent.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Hit {
    value: f32,
    context: usize,
    position: usize,
}

impl Eq for Hit {}

impl Ord for Hit {
    /// Larger values first; between equal values the earlier context.
    fn cmp(&self, other: &Self) -> Ordering {
        self.value
            .total_cmp(&other.value)
            .then(other.context.cmp(&self.context))
    }
}

impl PartialOrd for Hit {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The `keep` best hits of one latent: a min-heap whose top is the weakest kept.
struct TopHits {
    keep: usize,
    heap: BinaryHeap<Reverse<Hit>>,
}

impl TopHits {
    fn push(&mut self, hit: Hit) {
        if self.heap.len() < self.keep {
            self.heap.push(Reverse(hit));
        } else if let Some(mut weakest) = self.heap.peek_mut() {
            if hit > weakest.0 {
                *weakest = Reverse(hit);
            }
        }
    }

    fn sorted(self) -> Vec<Hit> {
        let mut hits: Vec<Hit> = self.heap.into_iter().map(|r| r.0).collect();
        hits.sort_by(|a, b| b.cmp(a));
        hits
    }
}

/// Contexts per forward: the dense [rows, n] activations stay near 16 M floats.
fn contexts_per_batch(context_len: usize, n: usize) -> usize {
    ((1usize << 24) / (context_len * n).max(1)).clamp(1, 64)
}

/// Builds the dashboards: densities of every latent, then for a sample across the density range and
/// the latents `opts.requested` their top and interval-sampled examples, activation histogram and
/// output-token effects, from at most `opts.max_tokens` held-out tokens.
pub fn build(
    sae: &InferenceSae,
    data: &HeldoutContexts,
    tokenizer: &Gpt2Tokenizer,
    hook_names: &[String],
    unembedding: &Unembedding,
    opts: &FeatureOptions,
) -> Result<FeatureDashboards> {
    let t = data.context_len;
    if t < 2 || data.len() == 0 {
        return Err(Error::Data(format!(
            "feature dashboards need held-out contexts of ≥ 2 tokens, got {} contexts of {t}",
            data.len()
        )));
    }
    let n = sae.n;
    if let Some(bad) = opts.requested.iter().find(|&&l| l >= n) {
        return Err(Error::Data(format!(
            "latent {bad} was asked for, but the SAE has {n} latents (0..{})",
            n - 1
        )));
    }
    let device = sae.weights.w_enc.device().clone();
    let n_contexts = data.len().min(opts.max_tokens.div_ceil(t)).max(1);
    let per_batch = contexts_per_batch(t, n);

    // Pass 1: densities of all latents, the strongest hit per (latent, context), top hits per latent.
    let mut counts = vec![0u64; n];
    let mut n_tokens = 0u64;
    let mut top: Vec<TopHits> = (0..n)
        .map(|_| TopHits {
            keep: opts.examples,
            heap: BinaryHeap::new(),
        })
        .collect();
    let all: Vec<usize> = (0..n_contexts).collect();
    for batch in all.chunks(per_batch) {
        let mask: Vec<f32> = batch
            .iter()
            .flat_map(|&c| {
                data.context(c)
                    .iter()
                    .enumerate()
                    .map(|(p, &id)| f32::from(u8::from(encoded(p, id))))
            })
            .collect();
        n_tokens += mask.iter().filter(|m| **m > 0.0).count() as u64;
        let mask = Tensor::from_vec(mask, (batch.len() * t, 1), &device)?;
        let x = data.activations_of(batch, &device)?;
        let acts = sae.encode(&x)?.broadcast_mul(&mask)?;
        let fired: Vec<f32> = acts
            .gt(0f64)?
            .to_dtype(DType::F32)?
            .sum(0)?
            .to_device(&Device::Cpu)?
            .to_vec1()?;
        for (c, f) in counts.iter_mut().zip(fired) {
            *c += f as u64;
        }
        let per_ctx = acts.reshape((batch.len(), t, n))?;
        let max: Vec<Vec<f32>> = per_ctx.max(1)?.to_device(&Device::Cpu)?.to_vec2()?;
        let argmax: Vec<Vec<u32>> = per_ctx.argmax(1)?.to_device(&Device::Cpu)?.to_vec2()?;
        for (b, &context) in batch.iter().enumerate() {
            for (latent, hits) in top.iter_mut().enumerate() {
                let value = max[b][latent];
                if value > 0.0 {
                    hits.push(Hit {
                        value,
                        context,
                        position: argmax[b][latent] as usize,
                    });
                }
            }
        }
    }
    let densities: Vec<f64> = counts
        .iter()
        .map(|&c| c as f64 / n_tokens.max(1) as f64)
        .collect();
    let histogram = histogram(&densities, opts.bins_per_decade);

    // Every latent by density, densest first (ties: the lower index), so the dead ones come last; the
    // sample takes evenly spaced ranks of the alive ones, the requested latents follow it.
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| counts[b].cmp(&counts[a]).then(a.cmp(&b)));
    let mut rank = vec![0; n];
    for (r, &latent) in order.iter().enumerate() {
        rank[latent] = r;
    }
    let alive = counts.iter().filter(|&&c| c > 0).count();
    let mut chosen: Vec<(usize, bool)> = sample_ranks(alive, opts.latents)
        .into_iter()
        .map(|r| (order[r], false))
        .collect();
    for &latent in &opts.requested {
        if !chosen.iter().any(|c| c.0 == latent) {
            chosen.push((latent, true));
        }
    }

    // Pass 2: the chosen latents' activations over every context, their top windows and samples.
    let mut hits: Vec<Vec<Hit>> = Vec::with_capacity(chosen.len());
    let mut top: Vec<Option<TopHits>> = top.into_iter().map(Some).collect();
    for &(latent, _) in &chosen {
        hits.push(top[latent].take().map(TopHits::sorted).unwrap_or_default());
    }
    drop(top);
    let columns: Vec<u32> = chosen.iter().map(|c| c.0 as u32).collect();
    let samples = sampling::sample(sae, data, n_contexts, &columns, &hits, opts, &device)?;
    let latents: Vec<usize> = chosen.iter().map(|c| c.0).collect();
    let (mut effects, output_tokens_missing): (Vec<Option<OutputEffects>>, _) = match unembedding {
        Unembedding::Tied(wte) => (
            output_effects(
                sae,
                wte,
                &latents,
                opts.output_tokens,
                opts.histogram_bins,
                tokenizer,
            )?
            .into_iter()
            .map(Some)
            .collect(),
            None,
        ),
        Unembedding::Missing(why) => (Vec::new(), Some(why.clone())),
    };
    effects.resize_with(chosen.len(), || None);
    let norms = if sae.layers > 1 {
        Some(sae.decoder_norms()?)
    } else {
        None
    };
    let example = |w: Window| -> Result<Example> {
        let ids = &data.context(w.context)[w.start..w.start + w.values.len()];
        Ok(Example {
            tokens: ids
                .iter()
                .map(|&id| tokenizer.decode(&[id]))
                .collect::<activations::Result<_>>()?,
            activations: w.values,
            token_ids: ids.to_vec(),
            context: w.context,
            start: w.start,
            focus: w.focus,
        })
    };
    let latents = chosen
        .iter()
        .zip(samples)
        .zip(effects)
        .map(|((&(latent, requested), samples), effects)| {
            let mut examples = samples
                .top
                .into_iter()
                .map(&example)
                .collect::<Result<Vec<_>>>()?;
            examples.sort_by(|a, b| {
                b.max_activation()
                    .total_cmp(&a.max_activation())
                    .then(a.context.cmp(&b.context))
            });
            let quantiles = samples
                .intervals
                .into_iter()
                .map(|i| {
                    Ok(QuantileGroup {
                        lower: i.lower,
                        upper: i.upper,
                        count: i.count,
                        examples: i.samples.into_iter().map(&example).collect::<Result<_>>()?,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let (promoted, suppressed, logit_histogram) = match effects {
                Some(e) => (e.promoted, e.suppressed, Some(e.histogram)),
                None => (Vec::new(), Vec::new(), None),
            };
            Ok(LatentDashboard {
                index: latent,
                density: densities[latent],
                density_rank: rank[latent],
                requested,
                group: sae.group_of(latent),
                decoder_norm_by_layer: norms
                    .as_ref()
                    .map(|n| n[latent].clone())
                    .unwrap_or_default(),
                examples,
                activation_histogram: samples.histogram,
                quantiles,
                promoted,
                suppressed,
                logit_histogram,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(FeatureDashboards {
        arch: sae.arch_name().into(),
        hooks: hook_names.to_vec(),
        n_latents: n,
        n_tokens,
        n_contexts: n_contexts as u64,
        context_len: t,
        histogram,
        dead_latents: (0..n).filter(|&i| counts[i] == 0).collect(),
        latents,
        output_tokens_missing,
    })
}

/// `want` ranks spread evenly over 0..alive (the first and the last included), without repeats.
fn sample_ranks(alive: usize, want: usize) -> Vec<usize> {
    match (alive, want) {
        (0, _) | (_, 0) => Vec::new(),
        (_, 1) => vec![0],
        _ if want >= alive => (0..alive).collect(),
        _ => {
            let mut ranks: Vec<usize> = (0..want)
                .map(|i| ((i * (alive - 1)) as f64 / (want - 1) as f64).round() as usize)
                .collect();
            ranks.dedup();
            ranks
        }
    }
}

/// The log10-density histogram of the alive latents; dead ones counted apart.
pub fn histogram(densities: &[f64], bins_per_decade: usize) -> DensityHistogram {
    let per = bins_per_decade.max(1) as f64;
    let logs: Vec<f64> = densities
        .iter()
        .filter(|d| **d > 0.0)
        .map(|d| d.log10())
        .collect();
    let dead = (densities.len() - logs.len()) as u64;
    let Some(lowest) = logs.iter().copied().reduce(f64::min) else {
        return DensityHistogram {
            log10_edges: Vec::new(),
            counts: Vec::new(),
            dead,
        };
    };
    let lo = lowest.floor().min(-1.0);
    let bins = ((-lo) * per).round() as usize;
    let log10_edges = (0..=bins).map(|i| lo + i as f64 / per).collect();
    let mut counts = vec![0u64; bins];
    for l in logs {
        let bin = (((l - lo) * per).floor() as usize).min(bins - 1);
        counts[bin] += 1;
    }
    DensityHistogram {
        log10_edges,
        counts,
        dead,
    }
}

/// The first `max_contexts` contexts of a model-backed config's held-out split, read as training
/// reads them: the same corpus reader, held-out fraction and context length.
pub fn heldout_tokens(cfg: &Config, max_contexts: usize) -> Result<Contexts> {
    corpus_contexts(cfg, Split::Heldout, max_contexts)
}

/// The first `max_contexts` contexts of `split` of a model-backed config's corpus, as training packs them.
fn corpus_contexts(cfg: &Config, split: Split, max_contexts: usize) -> Result<Contexts> {
    let (
        Some(spec),
        DataConfig::Model {
            model,
            context,
            held_out_fraction,
            ..
        },
    ) = (cfg.data.corpus_spec(), &cfg.data)
    else {
        return Err(not_model_backed());
    };
    let source = CorpusSource::open(&spec)?;
    let pack = crate::run::pack_options(split, *context, *held_out_fraction, model)?;
    Ok(source.contexts(pack, Some(max_contexts))?)
}

/// Contexts of `context_len` tokens a dashboard build reads.
pub fn contexts_wanted(opts: &FeatureOptions, context_len: usize) -> usize {
    opts.max_tokens.div_ceil(context_len.max(1)).max(1)
}

fn not_model_backed() -> Error {
    Error::config(
        "data.source",
        "feature dashboards need the run's tokens: a model and corpus (data.source = \"model\") \
         or activation shards (data.source = \"shards\")",
    )
}

/// SAELens-style hook names of a model-backed config: `blocks.L.hook_resid_post`.
pub fn hook_names(cfg: &Config) -> Vec<String> {
    match &cfg.data {
        DataConfig::Model { hook, layers, .. } => layers
            .iter()
            .map(|l| format!("blocks.{l}.hook_{hook}"))
            .collect(),
        _ => Vec::new(),
    }
}

/// The hook points of a model-backed config.
pub fn hook_points(cfg: &Config) -> Vec<HookPoint> {
    match &cfg.data {
        DataConfig::Model { hook, layers, .. } => layers.iter().map(|&l| hook.at(l)).collect(),
        _ => Vec::new(),
    }
}

/// Builds `RUN/features.json` for a run from an SAE in SAELens' layout (`sae_dir`: a checkpoint folder;
/// by default the run's final `RUN/sae/`) and its config's data: the held-out split of its corpus
/// through its model, or its held-out shards (else its training shards). Rewrites the run's
/// report.html with them.
pub fn build_for_run(
    run_dir: &Path,
    sae_dir: Option<&Path>,
    opts: &FeatureOptions,
    device: &Device,
) -> Result<FeatureDashboards> {
    let run = harness::RunDir::open_existing(run_dir)?;
    let cfg_json = run.read_config_json()?.ok_or_else(|| {
        Error::Data(format!(
            "{} has no config.json to say which model and corpus the SAE was trained on",
            run_dir.display()
        ))
    })?;
    let cfg: Config = serde_json::from_value(cfg_json)
        .map_err(|e| Error::Data(format!("{}/config.json: {e}", run_dir.display())))?;
    let sae_dir = sae_dir.map_or_else(|| run_dir.join("sae"), Path::to_path_buf);
    let sae = InferenceSae::from_saelens(&sae_dir, device)?;
    let dashboards = match &cfg.data {
        DataConfig::Model { model, dtype, .. } => {
            let dtype = runtime::device::candle_dtype(*dtype);
            let model = activations::models::load_model(model, dtype, device)?;
            build_from_model(&sae, &cfg, &model, opts)?
        }
        DataConfig::Shards {
            dir, held_out_dir, ..
        } => shards::build_from_shards(&sae, held_out_dir.as_deref().unwrap_or(dir), opts, device)?,
        DataConfig::Synthetic { .. } => return Err(not_model_backed()),
    };
    dashboards.write(run.path())?;
    eval::report::write_run_report(&run)?;
    Ok(dashboards)
}

/// The dashboards of `sae` on the held-out split of a model-backed `cfg` (its training split when the
/// held-out one is empty), through `model`.
pub fn build_from_model(
    sae: &InferenceSae,
    cfg: &Config,
    model: &Model,
    opts: &FeatureOptions,
) -> Result<FeatureDashboards> {
    let DataConfig::Model { context, .. } = &cfg.data else {
        return Err(not_model_backed());
    };
    let n = contexts_wanted(opts, *context);
    let mut contexts = heldout_tokens(cfg, n)?;
    if contexts.is_empty() {
        // As the run did (a corpus of one document has no held-out split).
        contexts = corpus_contexts(cfg, Split::Train, n)?;
    }
    build_through_model(sae, model, &hook_points(cfg), &contexts, opts)
}

/// The dashboards of `sae` on `contexts`, their activations from `model` at `hooks`.
pub fn build_through_model(
    sae: &InferenceSae,
    model: &Model,
    hooks: &[HookPoint],
    contexts: &Contexts,
    opts: &FeatureOptions,
) -> Result<FeatureDashboards> {
    let activations = |tokens: &Tensor| model_activations(model, hooks, tokens);
    let data = HeldoutContexts {
        activations: &activations,
        tokens: &contexts.tokens,
        context_len: contexts.context_len,
        model: Some(model),
    };
    let names: Vec<String> = hooks.iter().map(|h| h.to_string()).collect();
    let unembedding = Unembedding::of_model(Some(model));
    build(
        sae,
        &data,
        &Gpt2Tokenizer::new()?,
        &names,
        &unembedding,
        opts,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_counts_every_latent_once() {
        let d = [0.0, 0.5, 1.0, 1e-3, 2e-3, 0.0, 0.09];
        let h = histogram(&d, 4);
        assert_eq!(h.dead, 2);
        assert_eq!(h.counts.iter().sum::<u64>() + h.dead, d.len() as u64);
        assert_eq!(h.log10_edges.len(), h.counts.len() + 1);
        assert_eq!(h.log10_edges[0], -3.0);
        assert_eq!(*h.log10_edges.last().unwrap(), 0.0);
        assert_eq!(h.counts[0], 1, "1e-3 opens the first bin");
        let n = h.counts.len();
        assert_eq!(h.counts[n - 1], 1, "1.0 is clamped into the last bin");
        assert_eq!(h.counts[n - 2], 1, "0.5 (log10 -0.30) in [-0.5, -0.25)");
    }

    #[test]
    fn samples_span_the_density_ranks() {
        assert_eq!(sample_ranks(100, 5), vec![0, 25, 50, 74, 99]);
        assert_eq!(sample_ranks(3, 64), vec![0, 1, 2]);
        assert_eq!(sample_ranks(0, 64), Vec::<usize>::new());
        assert_eq!(sample_ranks(10, 1), vec![0]);
    }

    #[test]
    fn top_hits_keep_the_strongest_contexts_in_order() {
        let mut top = TopHits {
            keep: 3,
            heap: BinaryHeap::new(),
        };
        for (context, value) in [(0, 1.0), (1, 5.0), (2, 3.0), (3, 0.5), (4, 4.0), (5, 5.0)] {
            top.push(Hit {
                value,
                context,
                position: 1,
            });
        }
        let order: Vec<usize> = top.sorted().iter().map(|h| h.context).collect();
        assert_eq!(order, vec![1, 5, 4], "ties go to the earlier context");
    }
}
