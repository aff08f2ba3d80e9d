//! Where a rank's scores lie in the global matrix of the selection.
//!
//! The selection runs over a `rows × cols` matrix (a batch of tokens × latents, or one flat list as
//! `1 × n`), flattened row-major: the global index of (i, j) is `i·cols + j`, and ties go to the
//! lowest global index as in the single-device selection. Each rank holds one rectangular block of
//! it, stored row-major: whole rows for data-parallel training, a range of columns of every row for
//! latent-sharded dictionaries. Inside a block, the local order is the global order, so "at or above
//! the threshold" splits a block at one local position.

use crate::{Error, Result};

/// One rank's block of the global matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// Rows of the global matrix.
    pub rows: u64,
    /// Columns of the global matrix.
    pub cols: u64,
    /// First global row of the block.
    pub row_start: u64,
    pub row_count: u64,
    /// First global column of the block.
    pub col_start: u64,
    pub col_count: u64,
}

/// Bytes of a block's description on the wire.
pub(crate) const BLOCK_BYTES: usize = 6 * 8;

impl Block {
    /// Rows `start..start + count` of a `rows × cols` matrix (data-parallel: each rank's tokens).
    pub fn rows(rows: u64, cols: u64, start: u64, count: u64) -> Block {
        Block {
            rows,
            cols,
            row_start: start,
            row_count: count,
            col_start: 0,
            col_count: cols,
        }
    }

    /// Columns `start..start + count` of every row of a `rows × cols` matrix (latent-sharded: each
    /// rank's latents of every token).
    pub fn cols(rows: u64, cols: u64, start: u64, count: u64) -> Block {
        Block {
            rows,
            cols,
            row_start: 0,
            row_count: rows,
            col_start: start,
            col_count: count,
        }
    }

    /// Elements `offset..offset + len` of one flat list of `n`.
    pub fn range(n: u64, offset: u64, len: u64) -> Block {
        Block::cols(1, n, offset, len)
    }

    /// Elements of the whole matrix.
    pub fn global_len(&self) -> u64 {
        self.rows * self.cols
    }

    /// Elements of the block.
    pub fn len(&self) -> u64 {
        self.row_count * self.col_count
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The block lies inside its matrix.
    pub(crate) fn check(&self) -> Result<()> {
        let fits = |start: u64, count: u64, total: u64| {
            start.checked_add(count).is_some_and(|end| end <= total)
        };
        if self.rows.checked_mul(self.cols).is_none()
            || !fits(self.row_start, self.row_count, self.rows)
            || !fits(self.col_start, self.col_count, self.cols)
        {
            return Err(Error::Param(format!(
                "block {self:?} does not lie inside its {} × {} matrix",
                self.rows, self.cols
            )));
        }
        Ok(())
    }

    /// The local position of global index `g`, if the block holds it.
    pub fn local(&self, g: u64) -> Option<u64> {
        let (i, j) = (g / self.cols.max(1), g % self.cols.max(1));
        let inside = (self.row_start..self.row_start + self.row_count).contains(&i)
            && (self.col_start..self.col_start + self.col_count).contains(&j);
        inside.then(|| (i - self.row_start) * self.col_count + (j - self.col_start))
    }

    /// The global index of local position `l`.
    pub fn global(&self, l: u64) -> u64 {
        let (i, j) = (l / self.col_count, l % self.col_count);
        (self.row_start + i) * self.cols + self.col_start + j
    }

    /// How many local positions have a global index at most `g`: the block's split at `g`.
    pub fn count_at_or_below(&self, g: u64) -> u64 {
        let (i, j) = (g / self.cols.max(1), g % self.cols.max(1));
        if i < self.row_start {
            return 0;
        }
        if i >= self.row_start + self.row_count {
            return self.len();
        }
        let in_row = j
            .saturating_sub(self.col_start)
            .saturating_add(u64::from(j >= self.col_start));
        (i - self.row_start) * self.col_count + in_row.min(self.col_count)
    }

    pub(crate) fn to_bytes(self) -> [u8; BLOCK_BYTES] {
        let mut out = [0u8; BLOCK_BYTES];
        let fields = [
            self.rows,
            self.cols,
            self.row_start,
            self.row_count,
            self.col_start,
            self.col_count,
        ];
        for (chunk, f) in out.chunks_exact_mut(8).zip(fields) {
            chunk.copy_from_slice(&f.to_le_bytes());
        }
        out
    }

    pub(crate) fn from_bytes(bytes: &[u8]) -> Option<Block> {
        let f: Vec<u64> = bytes
            .get(..BLOCK_BYTES)?
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect();
        Some(Block {
            rows: f[0],
            cols: f[1],
            row_start: f[2],
            row_count: f[3],
            col_start: f[4],
            col_count: f[5],
        })
    }
}

/// Checks that the ranks' blocks, in rank order, share one matrix and cover it exactly once.
pub(crate) fn check_tiling(blocks: &[Block]) -> Result<()> {
    let Some(first) = blocks.first() else {
        return Err(Error::Param("no rank took part".into()));
    };
    for (r, b) in blocks.iter().enumerate() {
        b.check()
            .map_err(|e| Error::Param(format!("rank {r}: {e}")))?;
        if (b.rows, b.cols) != (first.rows, first.cols) {
            return Err(Error::Param(format!(
                "rank {r} selects over a {} × {} matrix, rank 0 over {} × {}",
                b.rows, b.cols, first.rows, first.cols
            )));
        }
    }
    let covered: u64 = blocks.iter().map(Block::len).sum();
    if covered != first.global_len() {
        return Err(Error::Param(format!(
            "the ranks' blocks hold {covered} elements of a {} × {} matrix",
            first.rows, first.cols
        )));
    }
    // Areas that add up to the whole cover it exactly once when no two blocks overlap.
    let overlap = |a: &Block, b: &Block| {
        let rows =
            a.row_start < b.row_start + b.row_count && b.row_start < a.row_start + a.row_count;
        let cols =
            a.col_start < b.col_start + b.col_count && b.col_start < a.col_start + a.col_count;
        rows && cols && !a.is_empty() && !b.is_empty()
    };
    for (r, a) in blocks.iter().enumerate() {
        if let Some(s) = blocks[r + 1..].iter().position(|b| overlap(a, b)) {
            return Err(Error::Param(format!(
                "the blocks of ranks {r} and {} overlap",
                r + 1 + s
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_and_global_positions_agree() {
        let b = Block::cols(3, 10, 4, 3);
        let mut seen = Vec::new();
        for g in 0..30 {
            if let Some(l) = b.local(g) {
                assert_eq!(b.global(l), g);
                seen.push(l);
            }
            let below = (0..=g).filter(|&h| b.local(h).is_some()).count() as u64;
            assert_eq!(b.count_at_or_below(g), below, "g = {g}");
        }
        assert_eq!(seen, (0..9).collect::<Vec<_>>());
        assert_eq!(Block::from_bytes(&b.to_bytes()), Some(b));
    }

    #[test]
    fn tilings_are_checked() {
        let rows = [Block::rows(4, 5, 0, 1), Block::rows(4, 5, 1, 3)];
        assert!(check_tiling(&rows).is_ok());
        let gap = [Block::rows(4, 5, 0, 1), Block::rows(4, 5, 2, 2)];
        assert!(check_tiling(&gap).is_err());
        let overlap = [
            Block::cols(2, 6, 0, 4),
            Block::cols(2, 6, 2, 2),
            Block::cols(2, 6, 4, 0),
        ];
        assert!(check_tiling(&overlap).is_err());
        let other = [Block::range(5, 0, 5), Block::range(6, 5, 0)];
        assert!(check_tiling(&other).is_err());
    }
}
