//! Initialization statistics from the first batch: the input scale and the geometric median for b_dec.
use crate::Result;
use candle_core::{DType, Tensor};
use rayon::prelude::*;

/// Per-layer factors `s_l` with mean ‖s_l · x_l‖² = 1 over the batch [B, L, d].
pub fn unit_square_norm_scales(x: &Tensor) -> Result<Vec<f64>> {
    let (_, layers, _) = x.dims3()?;
    let mean_sq: Vec<f64> = x.to_dtype(DType::F64)?.sqr()?.sum(2)?.mean(0)?.to_vec1()?;
    debug_assert_eq!(mean_sq.len(), layers);
    Ok(mean_sq
        .iter()
        .map(|m| if *m > 0.0 { 1.0 / m.sqrt() } else { 1.0 })
        .collect())
}

/// Rows of the batch used for the geometric median: plenty for an initial bias.
const MEDIAN_ROWS: usize = 4096;
/// Rows per parallel partial sum: fixed, so that the sums run in one order whatever the thread count.
const MEDIAN_CHUNK: usize = 64;

/// Geometric median of the rows of `x` [B, d] (at most the first 4096) by Weiszfeld's iteration, in f64 on
/// the host. Each iteration's sums are partial sums over fixed chunks of rows, on all cores, added in
/// chunk order: deterministic, and at GPT-2 XL widths a fraction of a second instead of seconds.
pub fn geometric_median(x: &Tensor, iterations: usize) -> Result<Vec<f32>> {
    let x = x.narrow(0, 0, x.dim(0)?.min(MEDIAN_ROWS))?;
    let (b, d) = x.dims2()?;
    let data: Vec<f64> = x.to_dtype(DType::F64)?.flatten_all()?.to_vec1()?;
    let chunks: Vec<&[f64]> = data.chunks(MEDIAN_CHUNK * d.max(1)).collect();
    let (mut median, _) = divided_sums(&chunks, d, |_| b as f64);
    for _ in 0..iterations {
        let (num, den) = divided_sums(&chunks, d, |row| {
            row.iter()
                .zip(&median)
                .map(|(a, m)| (a - m) * (a - m))
                .sum::<f64>()
                .sqrt()
                .max(1e-8)
        });
        let next: Vec<f64> = num.iter().map(|n| n / den).collect();
        let moved = next
            .iter()
            .zip(&median)
            .map(|(a, m)| (a - m) * (a - m))
            .sum::<f64>()
            .sqrt();
        median = next;
        if moved < 1e-7 {
            break;
        }
    }
    Ok(median.into_iter().map(|v| v as f32).collect())
}

/// (Σ row / w(row), Σ 1 / w(row)) over the rows of `chunks`: partial sums per chunk on all cores, added
/// in chunk order.
fn divided_sums(chunks: &[&[f64]], d: usize, w: impl Fn(&[f64]) -> f64 + Sync) -> (Vec<f64>, f64) {
    let parts: Vec<(Vec<f64>, f64)> = chunks
        .par_iter()
        .map(|chunk| {
            let mut num = vec![0f64; d];
            let mut den = 0f64;
            for row in chunk.chunks(d.max(1)) {
                let w = w(row);
                den += 1.0 / w;
                num.iter_mut().zip(row).for_each(|(n, v)| *n += v / w);
            }
            (num, den)
        })
        .collect();
    parts
        .into_iter()
        .fold((vec![0f64; d], 0f64), |(mut acc, s), (part, p)| {
            acc.iter_mut().zip(&part).for_each(|(a, v)| *a += v);
            (acc, s + p)
        })
}
