//! What a model's residual stream looks like to an SAE: norms by position and by token kind, the
//! share of variance in the top principal directions and in the largest single dimensions, and the
//! embedding norms. The analysis behind docs/tiny-model.md.
//!
//!     cargo run --release -p activations --example resid_stats -- --model tiny --layer 2
// The covariance and eigenvector loops index rows and columns of square matrices by design.
#![allow(clippy::needless_range_loop)]
use activations::corpus::{CorpusSource, CorpusSpec, PackOptions, Split};
use activations::{models::load_model, tokenizer::END_OF_TEXT};
use candle_core::{DType, Device, Tensor};
use clap::Parser;
use gpt2::HookPoint;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "tiny")]
    model: String,
    #[arg(long, default_value_t = 2)]
    layer: usize,
    #[arg(long, default_value = "default")]
    corpus: String,
    #[arg(long, default_value_t = 64)]
    context: usize,
    #[arg(long, default_value_t = 128)]
    contexts: usize,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let loaded = load_model(&args.model, DType::F32, &Device::Cpu)?;
    let model = loaded
        .as_gpt2()
        .ok_or_else(|| anyhow::anyhow!("resid_stats reads GPT-2 models only"))?;
    let source = CorpusSource::open(&CorpusSpec::new(args.corpus.clone()))?;
    let opts = PackOptions {
        split: Split::Heldout,
        heldout_fraction: 0.1,
        context_len: args.context,
        prepend_bos: true,
        tokenizer: activations::Tokenizer::for_model(&args.model)?,
    };
    let contexts = source.contexts(opts, Some(args.contexts))?;
    let (n, t) = (contexts.len(), args.context);
    let tokens = Tensor::from_vec(contexts.tokens.clone(), (n, t), &Device::Cpu)?;
    let hook = HookPoint::ResidPost(args.layer);
    let acts = model.forward_hooks(&tokens, &[hook])?.remove(0);
    let d = acts.dim(2)?;
    let rows: Vec<Vec<f32>> = acts.reshape((n * t, d))?.to_vec2()?;
    let norm = |r: &[f32]| r.iter().map(|v| v * v).sum::<f32>().sqrt() as f64;

    println!(
        "model {} layer {} ({n} held-out contexts of {t})",
        args.model, args.layer
    );
    let wte: Vec<Vec<f32>> = model
        .named_tensors()
        .into_iter()
        .find(|(k, _)| k == "wte.weight")
        .map(|(_, w)| w.to_vec2())
        .transpose()?
        .unwrap_or_default();
    let mut used: Vec<u32> = contexts.tokens.clone();
    used.sort_unstable();
    used.dedup();
    let mean_norm = |ids: &mut dyn Iterator<Item = usize>| {
        let v: Vec<f64> = ids.map(|i| norm(&wte[i])).collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    };
    println!(
        "token embedding norm: corpus tokens {:.3}, all tokens {:.3}, <|endoftext|> {:.3}",
        mean_norm(&mut used.iter().map(|&i| i as usize)),
        mean_norm(&mut (0..wte.len())),
        norm(&wte[END_OF_TEXT as usize])
    );
    let by_pos: Vec<f64> = (0..t)
        .map(|p| (0..n).map(|c| norm(&rows[c * t + p])).sum::<f64>() / n as f64)
        .collect();
    println!(
        "mean norm at positions 0..8: {:?}",
        by_pos[..8.min(t)]
            .iter()
            .map(|v| format!("{v:.2}"))
            .collect::<Vec<_>>()
    );
    let body: Vec<usize> = (0..n * t)
        .filter(|&i| i % t != 0 && contexts.tokens[i] != END_OF_TEXT)
        .collect();
    let eot: Vec<usize> = (0..n * t)
        .filter(|&i| i % t != 0 && contexts.tokens[i] == END_OF_TEXT)
        .collect();
    let avg =
        |ids: &[usize]| ids.iter().map(|&i| norm(&rows[i])).sum::<f64>() / ids.len().max(1) as f64;
    println!(
        "mean norm: positions 1.. without <|endoftext|> {:.2} ({} rows), <|endoftext|> inside contexts {:.2} ({} rows)",
        avg(&body),
        body.len(),
        avg(&eot),
        eot.len()
    );
    // Between-position variance: how much of the stream is explained by the position alone.
    let pos_ids: Vec<usize> = (0..n * t).filter(|&i| i % t != 0).collect();
    let grand: Vec<f64> = (0..d)
        .map(|k| pos_ids.iter().map(|&i| rows[i][k] as f64).sum::<f64>() / pos_ids.len() as f64)
        .collect();
    let total_var: f64 = pos_ids
        .iter()
        .map(|&i| {
            (0..d)
                .map(|k| (rows[i][k] as f64 - grand[k]).powi(2))
                .sum::<f64>()
        })
        .sum::<f64>()
        / pos_ids.len() as f64;
    let between: f64 = (1..t)
        .map(|p| {
            (0..d)
                .map(|k| {
                    let m = (0..n).map(|c| rows[c * t + p][k] as f64).sum::<f64>() / n as f64;
                    (m - grand[k]).powi(2)
                })
                .sum::<f64>()
        })
        .sum::<f64>()
        / (t - 1) as f64;
    println!(
        "share of the variance (positions 1..) explained by the position alone: {:.3}",
        between / total_var
    );
    let late: Vec<usize> = body.iter().copied().filter(|&i| i % t >= 8).collect();
    for (label, ids) in [
        ("all positions", (0..n * t).collect::<Vec<_>>()),
        ("positions 1.., no special tokens", body),
        ("positions 8.., no special tokens", late),
    ] {
        let (eig, dims) = spectrum(&rows, &ids, d);
        let total: f64 = eig.iter().sum();
        let cum = |k: usize| eig.iter().take(k).sum::<f64>() / total;
        println!(
            "{label}: variance in top 1/4/8/16/32 principal directions {:.3} {:.3} {:.3} {:.3} {:.3}; top 4 single dimensions {:.3} (dims {:?}); participation ratio {:.1}",
            cum(1),
            cum(4),
            cum(8),
            cum(16),
            cum(32),
            dims.iter().take(4).map(|(v, _)| v).sum::<f64>() / total,
            dims.iter().take(4).map(|(_, i)| i).collect::<Vec<_>>(),
            total * total / eig.iter().map(|e| e * e).sum::<f64>()
        );
    }
    Ok(())
}

/// Eigenvalues of the covariance of `rows[ids]` (descending) and the per-dimension variances
/// (descending, with their dimension).
fn spectrum(rows: &[Vec<f32>], ids: &[usize], d: usize) -> (Vec<f64>, Vec<(f64, usize)>) {
    let m = ids.len() as f64;
    let mut mean = vec![0f64; d];
    for &i in ids {
        for (a, v) in mean.iter_mut().zip(&rows[i]) {
            *a += *v as f64 / m;
        }
    }
    let mut cov = vec![vec![0f64; d]; d];
    for &i in ids {
        let x: Vec<f64> = rows[i]
            .iter()
            .zip(&mean)
            .map(|(v, mu)| *v as f64 - mu)
            .collect();
        for a in 0..d {
            for b in a..d {
                cov[a][b] += x[a] * x[b] / m;
            }
        }
    }
    for a in 0..d {
        for b in 0..a {
            cov[a][b] = cov[b][a];
        }
    }
    let mut dims: Vec<(f64, usize)> = (0..d).map(|a| (cov[a][a], a)).collect();
    dims.sort_by(|x, y| y.0.total_cmp(&x.0));
    let mut eig = jacobi_eigenvalues(cov);
    eig.sort_by(|a, b| b.total_cmp(a));
    (eig, dims)
}

/// Eigenvalues of a symmetric matrix by cyclic Jacobi rotations.
fn jacobi_eigenvalues(mut a: Vec<Vec<f64>>) -> Vec<f64> {
    let n = a.len();
    for _sweep in 0..50 {
        let off: f64 = (0..n)
            .flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| a[i][j] * a[i][j])
            .sum();
        if off < 1e-18 {
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                if a[p][q].abs() < 1e-30 {
                    continue;
                }
                let theta = (a[q][q] - a[p][p]) / (2.0 * a[p][q]);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for k in 0..n {
                    let (akp, akq) = (a[k][p], a[k][q]);
                    a[k][p] = c * akp - s * akq;
                    a[k][q] = s * akp + c * akq;
                }
                for k in 0..n {
                    let (apk, aqk) = (a[p][k], a[q][k]);
                    a[p][k] = c * apk - s * aqk;
                    a[q][k] = s * apk + c * aqk;
                }
            }
        }
    }
    (0..n).map(|i| a[i][i]).collect()
}
