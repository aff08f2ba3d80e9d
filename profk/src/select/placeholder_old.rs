//! Placeholder: a full-sort implementation of the public API, replaced by the Prof-K paths.
use crate::{Error, Mode, NanPolicy, Order, Result, TopKOptions};
use candle_core::{DType, Tensor};
use std::time::Duration;

/// Per-call record of what the selector did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SelectStats {
    pub attempts: u32,
    pub fell_back: bool,
    pub retained: u64,
    pub capacity: u64,
    pub sample: u64,
    pub threshold_rank: u64,
    pub time_sample: Duration,
    pub time_filter: Duration,
    pub time_select: Duration,
}

/// Values (input dtype) and i64 indices of the k selected elements of every selection.
#[derive(Clone, Debug)]
pub struct TopK {
    pub values: Tensor,
    pub indices: Tensor,
    pub stats: SelectStats,
}

pub fn topk(x: &Tensor, k: usize, opts: &TopKOptions) -> Result<TopK> {
    let dims = x.dims().to_vec();
    let (rows, n, out_shape): (usize, usize, Vec<usize>) = match opts.mode {
        Mode::Flat => (1, x.elem_count(), vec![k]),
        Mode::Rowwise => {
            let n = *dims.last().ok_or_else(|| Error::Shape {
                shape: dims.clone(),
                reason: "row-wise top-k needs at least one dimension".into(),
            })?;
            let mut s = dims.clone();
            *s.last_mut().expect("non-empty") = k;
            (x.elem_count() / n.max(1), n, s)
        }
    };
    if k > n {
        return Err(Error::KTooLarge { k, n });
    }
    let data: Vec<f64> = x.flatten_all()?.to_dtype(DType::F64)?.to_vec1()?;
    if opts.nan == NanPolicy::Error {
        let nans: Vec<usize> = (0..data.len()).filter(|&i| data[i].is_nan()).collect();
        if let Some(&first) = nans.first() {
            return Err(Error::NaN { count: nans.len(), first });
        }
    }
    let key = |v: f64| {
        let v = if opts.by_magnitude { v.abs() } else { v };
        if v.is_nan() { f64::INFINITY } else { v }
    };
    let is_nan_rank = |v: f64| v.is_nan();
    let mut idx_out = Vec::with_capacity(rows * k);
    for r in 0..rows {
        let row = &data[r * n..(r + 1) * n];
        let mut ids: Vec<usize> = (0..n).collect();
        ids.sort_by(|&a, &b| {
            let (va, vb) = (row[a], row[b]);
            (is_nan_rank(vb), key(vb))
                .partial_cmp(&(is_nan_rank(va), key(va)))
                .expect("NaN mapped to a key")
                .then(a.cmp(&b))
        });
        ids.truncate(k);
        if opts.order == Order::Index {
            ids.sort_unstable();
        }
        idx_out.extend(ids.into_iter().map(|i| i as i64));
    }
    let device = x.device();
    let indices = Tensor::from_vec(idx_out.clone(), out_shape.as_slice(), device)?;
    let flat = x.flatten_all()?;
    let gather_idx: Vec<u32> = idx_out
        .iter()
        .enumerate()
        .map(|(j, &i)| (if opts.mode == Mode::Rowwise { (j / k.max(1)) * n } else { 0 } + i as usize) as u32)
        .collect();
    let values = flat
        .index_select(&Tensor::new(gather_idx.as_slice(), device)?, 0)?
        .reshape(out_shape.as_slice())?;
    Ok(TopK { values, indices, stats: SelectStats { attempts: 1, ..Default::default() } })
}

/// Row-wise selection on `scores [.., n]`, then a gather of the rows of `values [.., n, m]`.
pub fn topk_gather(scores: &Tensor, values: &Tensor, k: usize, opts: &TopKOptions) -> Result<(Tensor, Tensor)> {
    let sel = topk(scores, k, &TopKOptions { mode: Mode::Rowwise, ..opts.clone() })?;
    let idx = sel.indices.to_dtype(DType::U32)?;
    let m = *values.dims().last().unwrap_or(&1);
    let idx_exp = idx.unsqueeze(idx.rank())?.repeat(vec![1; idx.rank()].into_iter().chain([m]).collect::<Vec<_>>().as_slice())?;
    let gathered = values.gather(&idx_exp.contiguous()?, values.rank() - 2)?;
    Ok((gathered, sel.indices))
}
