//! Choosing which coordinates of the accumulated gradient are applied this step.
use crate::error::{Error, Result};
use crate::layout::FlatLayout;
use candle_core::{DType, Tensor};
use profk::{Mode, Order, Selector, TopKOptions};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Over which coordinates one selection ranks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// One selection over every parameter coordinate (k = ρ·N).
    #[default]
    Global,
    /// One selection per parameter tensor (k_i = ρ·n_i, at least one each).
    PerTensor,
}

/// Which selector runs, and optionally a second one whose index set must match.
#[derive(Clone, Debug, PartialEq)]
pub struct SelectorChoice {
    pub kind: Selector,
    pub compare_with: Option<Selector>,
}

/// The chosen coordinates (flat, ascending, i64) and their accumulated values.
#[derive(Clone, Debug)]
pub struct Selection {
    pub indices: Tensor,
    pub values: Tensor,
    /// Time of the primary selector (device synchronized).
    pub time: Duration,
    /// Time of the comparison selector, when one ran.
    pub compare_time: Option<Duration>,
    /// Time of the residual update when it ran as a pass of its own (zero when fused into `time`).
    pub accumulate: Duration,
}

impl Selection {
    pub fn k(&self) -> usize {
        self.indices.elem_count()
    }
}

/// Number of coordinates kept out of `n` at `density`: round(ρ·n), at least one (when n > 0).
pub fn k_for(density: f64, n: usize) -> usize {
    ((density * n as f64).round() as usize).clamp(n.min(1), n)
}

/// Top `density` of `|acc|` over `acc` (flat, laid out by `layout`), in `scope`.
pub fn select(
    acc: &Tensor,
    layout: &FlatLayout,
    density: f64,
    scope: Scope,
    choice: &SelectorChoice,
    step: u64,
) -> Result<Selection> {
    let (indices, values, time) = timed(acc, layout, density, scope, choice.kind)?;
    let selection = Selection {
        indices,
        values,
        time,
        compare_time: None,
        accumulate: Duration::ZERO,
    };
    cross_checked(selection, choice, step, |other| {
        timed(acc, layout, density, scope, other)
    })
}

/// `selection` (by `choice.kind`) checked against `choice.compare_with`, run by `run_other`, which
/// must select the same index set, and with its time; as it is when there is nothing to compare with.
pub(crate) fn cross_checked(
    mut selection: Selection,
    choice: &SelectorChoice,
    step: u64,
    run_other: impl FnOnce(Selector) -> Result<(Tensor, Tensor, Duration)>,
) -> Result<Selection> {
    let Some(other) = choice.compare_with else {
        return Ok(selection);
    };
    let (other_idx, _, t) = run_other(other)?;
    selection.compare_time = Some(t);
    check_same(&selection.indices, &other_idx).map_err(|detail| Error::SelectorMismatch {
        step,
        primary: choice.kind,
        secondary: other,
        detail,
    })?;
    Ok(selection)
}

/// The selection by `selector`, timed between device synchronizations.
pub(crate) fn timed(
    acc: &Tensor,
    layout: &FlatLayout,
    density: f64,
    scope: Scope,
    selector: Selector,
) -> Result<(Tensor, Tensor, Duration)> {
    acc.device().synchronize()?;
    let start = Instant::now();
    let (i, v) = run(acc, layout, density, scope, selector)?;
    acc.device().synchronize()?;
    Ok((i, v, start.elapsed()))
}

/// Flat or per-tensor selection by magnitude, indices ascending.
pub(crate) fn options(selector: Selector) -> TopKOptions {
    TopKOptions {
        selector,
        mode: Mode::Flat,
        order: Order::Index,
        by_magnitude: true,
        ..Default::default()
    }
}

fn run(
    acc: &Tensor,
    layout: &FlatLayout,
    density: f64,
    scope: Scope,
    selector: Selector,
) -> Result<(Tensor, Tensor)> {
    let opts = options(selector);
    match scope {
        Scope::Global => {
            let top = profk::topk(acc, k_for(density, layout.total()), &opts)?;
            Ok((top.indices, top.values))
        }
        Scope::PerTensor => {
            let mut indices = Vec::with_capacity(layout.spans().len());
            let mut values = Vec::with_capacity(layout.spans().len());
            for span in layout.spans() {
                let part = acc.narrow(0, span.offset, span.len)?;
                let top = profk::topk(&part, k_for(density, span.len), &opts)?;
                let offset = Tensor::new(span.offset as i64, acc.device())?;
                indices.push(top.indices.broadcast_add(&offset)?);
                values.push(top.values);
            }
            Ok((Tensor::cat(&indices, 0)?, Tensor::cat(&values, 0)?))
        }
    }
}

/// Both index sets are ascending, so equal sets are equal vectors.
fn check_same(a: &Tensor, b: &Tensor) -> std::result::Result<(), String> {
    let to_vec = |t: &Tensor| {
        t.to_dtype(DType::I64)
            .and_then(|t| t.to_vec1::<i64>())
            .map_err(|e| e.to_string())
    };
    let (a, b) = (to_vec(a)?, to_vec(b)?);
    if a.len() != b.len() {
        return Err(format!("{} vs {} indices", a.len(), b.len()));
    }
    match a.iter().zip(&b).position(|(x, y)| x != y) {
        None => Ok(()),
        Some(p) => Err(format!(
            "first difference at position {p}: {} vs {}",
            a[p], b[p]
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::check_same;
    use candle_core::{Device, Tensor};

    #[test]
    fn compare_rejects_different_index_sets() {
        let t = |v: &[i64]| Tensor::new(v, &Device::Cpu).unwrap();
        assert!(check_same(&t(&[1, 4, 9]), &t(&[1, 4, 9])).is_ok());
        let err = check_same(&t(&[1, 4, 9]), &t(&[1, 5, 9])).unwrap_err();
        assert!(err.contains("position 1: 4 vs 5"), "{err}");
        assert!(check_same(&t(&[1, 4]), &t(&[1, 4, 9]))
            .unwrap_err()
            .contains("2 vs 3"));
    }
}
