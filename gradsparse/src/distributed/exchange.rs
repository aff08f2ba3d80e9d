//! What crosses the wire each step of data-parallel fine-tuning, on host buffers: one function per
//! exchange mode. Every rank calls the same function with its own data and gets the same update.
//!
//! Updates are means over the ranks (each rank's gradient is the mean over its own micro-batch, so
//! the mean over ranks is the gradient of the global batch). Sparse sums are taken in f64 in rank
//! order and rounded to f32 once: `(Σ_r v_r) / W`, identical on every rank.
use crate::error::{Error, Result};
use collective::Collective;
use profk::sharded::{self, Block};
use profk::{Order, TopKOptions};
use std::time::{Duration, Instant};

/// Bytes of one (index, value) pair on the wire: a u32 coordinate and an f32 value.
pub const PAIR_BYTES: u64 = 8;

/// Sparse coordinates (ascending, distinct) and their values.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pairs {
    pub indices: Vec<u32>,
    pub values: Vec<f32>,
}

impl Pairs {
    pub fn len(&self) -> usize {
        self.indices.len()
    }

    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }

    fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len() * PAIR_BYTES as usize);
        for (&i, &v) in self.indices.iter().zip(&self.values) {
            out.extend_from_slice(&i.to_le_bytes());
            out.extend_from_slice(&v.to_bits().to_le_bytes());
        }
        out
    }

    fn from_bytes(rank: usize, bytes: &[u8]) -> Result<Self> {
        if !bytes.len().is_multiple_of(PAIR_BYTES as usize) {
            return Err(Error::Distributed(format!(
                "rank {rank} sent {} bytes of pairs, not a multiple of {PAIR_BYTES}",
                bytes.len()
            )));
        }
        let mut p = Pairs::default();
        for c in bytes.chunks_exact(PAIR_BYTES as usize) {
            let word =
                |r: std::ops::Range<usize>| u32::from_le_bytes(c[r].try_into().unwrap_or([0; 4]));
            p.indices.push(word(0..4));
            p.values.push(f32::from_bits(word(4..8)));
        }
        Ok(p)
    }
}

/// What one exchange put on the wire, on this rank.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Wire {
    /// Bytes this rank handed to the collectives.
    pub sent: u64,
    /// Bytes the `dense` exchange would have handed them (the f32 gradient, and the velocity with
    /// momentum correction).
    pub dense: u64,
    /// Time inside the collectives.
    pub collective: Duration,
}

impl Wire {
    /// `dense / sent`: how many times fewer bytes than the dense all-reduce (0 when nothing was sent).
    pub fn ratio(&self) -> f64 {
        if self.sent == 0 {
            0.0
        } else {
            self.dense as f64 / self.sent as f64
        }
    }
}

fn coll(e: collective::Error) -> Error {
    Error::Distributed(e.to_string())
}

/// `dense`: the element-wise mean of `buf` over the ranks, in place (sum in rank order, then ÷ W).
pub fn dense_mean(c: &dyn Collective, buf: &mut [f32]) -> Result<Duration> {
    let started = Instant::now();
    c.all_reduce_sum_f32(buf).map_err(coll)?;
    let took = started.elapsed();
    let world = c.world();
    if world > 1 {
        let w = world as f32;
        buf.iter_mut().for_each(|x| *x /= w);
    }
    Ok(took)
}

/// `sparse`: every rank's pairs gathered and summed into one update over the union of their
/// coordinates (DGC's exchange); values are the mean over the ranks.
pub fn sparse_mean(c: &dyn Collective, mine: &Pairs) -> Result<(Pairs, Wire)> {
    let started = Instant::now();
    let gathered = c.all_gather_bytes(&mine.to_bytes()).map_err(coll)?;
    let collective = started.elapsed();
    let ranks = gathered
        .iter()
        .enumerate()
        .map(|(r, b)| Pairs::from_bytes(r, b))
        .collect::<Result<Vec<_>>>()?;
    let wire = Wire {
        sent: mine.len() as u64 * PAIR_BYTES,
        dense: 0,
        collective,
    };
    Ok((mean_of(&ranks), wire))
}

/// The mean over `ranks` of their sparse vectors, over the union of the coordinates: f64 sums in
/// rank order, divided by the number of ranks and rounded to f32 once.
pub fn mean_of(ranks: &[Pairs]) -> Pairs {
    let mut all: Vec<(u32, f32)> = ranks
        .iter()
        .flat_map(|p| p.indices.iter().copied().zip(p.values.iter().copied()))
        .collect();
    // Stable: equal coordinates stay in rank order, so every rank adds in the same order.
    all.sort_by_key(|&(i, _)| i);
    let w = ranks.len().max(1) as f64;
    let mut out = Pairs::default();
    let mut rest = all.as_slice();
    while let Some(&(i, _)) = rest.first() {
        let run = rest.partition_point(|&(j, _)| j == i);
        let sum: f64 = rest[..run].iter().map(|&(_, v)| v as f64).sum();
        out.indices.push(i);
        out.values.push((sum / w) as f32);
        rest = &rest[run..];
    }
    out
}

/// One segment of the coordinate space that the global cut ranks on its own: the whole space for
/// a global selection, one parameter tensor each for a per-tensor selection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Coordinates `start..end`.
    pub start: u32,
    pub end: u32,
    /// Coordinates the update keeps in it.
    pub k: usize,
}

/// `global`: the `sparse` exchange's summed update cut to its exact top-k by magnitude in each
/// segment, ties to the lowest coordinate, by the sharded Prof-K: the union is split into W
/// contiguous blocks, one per rank, which draw one pooled sample, all-reduce their counts and
/// gather the candidates for the exact cut. The update then has exactly Σ k coordinates whatever
/// the world size.
pub fn global_topk(
    c: &dyn Collective,
    mine: &Pairs,
    segments: &[Segment],
) -> Result<(Pairs, Wire)> {
    let (summed, mut wire) = sparse_mean(c, mine)?;
    let opts = TopKOptions {
        order: Order::Index,
        by_magnitude: true,
        ..TopKOptions::default()
    };
    let (rank, world) = (c.rank() as u64, c.world() as u64);
    let mut out = Pairs::default();
    for seg in segments {
        let lo = summed.indices.partition_point(|&i| i < seg.start);
        let hi = summed.indices.partition_point(|&i| i < seg.end);
        let n = (hi - lo) as u64;
        // This rank's block of the segment's union: ranks split it as evenly as it goes.
        let (from, to) = (n * rank / world, n * (rank + 1) / world);
        let shard = &summed.values[lo + from as usize..lo + to as usize];
        let top = sharded::topk(
            c,
            shard,
            Block::range(n, from, to - from),
            seg.k.min(n as usize),
            &opts,
        )
        .map_err(|e| Error::Distributed(format!("global top-k of the summed update: {e}")))?;
        wire.sent += top.stats.bytes_sent;
        wire.collective += top.stats.time_collectives;
        for (&g, &v) in top.indices.iter().zip(&top.values) {
            out.indices.push(summed.indices[lo + g as usize]);
            out.values.push(v);
        }
    }
    Ok((out, wire))
}

/// The coordinates of `mine` that `update` applies, with this rank's values: what leaves this
/// rank's residual. The rest of what it sent (dropped by the global cut) stays in its residual.
pub fn applied_share(mine: &Pairs, update: &Pairs) -> Pairs {
    let mut out = Pairs::default();
    let mut j = 0;
    for (&i, &v) in mine.indices.iter().zip(&mine.values) {
        j += update.indices[j..].partition_point(|&u| u < i);
        if update.indices.get(j) == Some(&i) {
            out.indices.push(i);
            out.values.push(v);
        }
    }
    out
}
