//! Where every parameter lives in the one flat coordinate space that selection works in.
use crate::error::{Error, Result};
use candle_core::{Shape, Var};

/// One parameter tensor: its name, shape and span `[offset, offset + len)` of the flat space.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamSpan {
    pub name: String,
    pub shape: Shape,
    pub offset: usize,
    pub len: usize,
}

/// The concatenation order of the parameters (sorted by name, so it does not depend on hash order).
#[derive(Clone, Debug, PartialEq)]
pub struct FlatLayout {
    spans: Vec<ParamSpan>,
    total: usize,
}

impl FlatLayout {
    /// Lays out `(name, var)` pairs in name order.
    pub fn new(named: &[(String, Var)]) -> Result<Self> {
        let mut sorted: Vec<(&String, &Var)> = named.iter().map(|(n, v)| (n, v)).collect();
        sorted.sort_by(|a, b| a.0.cmp(b.0));
        let mut spans = Vec::with_capacity(sorted.len());
        let mut offset = 0usize;
        for (name, var) in sorted {
            if spans.last().is_some_and(|s: &ParamSpan| &s.name == name) {
                return Err(Error::Param {
                    name: name.clone(),
                    message: "appears twice".into(),
                });
            }
            let len = var.elem_count();
            spans.push(ParamSpan {
                name: name.clone(),
                shape: var.shape().clone(),
                offset,
                len,
            });
            offset += len;
        }
        Ok(Self {
            spans,
            total: offset,
        })
    }

    pub fn spans(&self) -> &[ParamSpan] {
        &self.spans
    }

    /// Number of coordinates over all parameters.
    pub fn total(&self) -> usize {
        self.total
    }

    /// Length of the largest parameter.
    pub fn max_len(&self) -> usize {
        self.spans.iter().map(|s| s.len).max().unwrap_or(0)
    }

    /// For indices sorted ascending, the range of positions in `sorted` that fall in each span.
    pub fn partition(&self, sorted: &[i64]) -> Vec<std::ops::Range<usize>> {
        let mut ranges = Vec::with_capacity(self.spans.len());
        let mut start = 0usize;
        for span in &self.spans {
            let end_coord = (span.offset + span.len) as i64;
            let end = start + sorted[start..].partition_point(|&i| i < end_coord);
            ranges.push(start..end);
            start = end;
        }
        ranges
    }
}
