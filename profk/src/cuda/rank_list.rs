//! The sorted top-k of few rows straight from their lists (kernels/rank_list.cuh): each passed row's
//! buffer, each fallen-back row's k composites. One cooperative launch in place of the buffer's
//! radix selection and the ranking of its k outputs.
use super::abi::RankListArgs;
use super::filter::Buffer;
use super::launch::{Arena, Dev, Params};
use super::module::Family;
use super::{Input, Shape};
use crate::work_split::RANK_LIST_MAX_ROWS;
use crate::Result;

/// Threads of a block (`RL_THREADS`).
const THREADS: u32 = 1024;
/// Bins of a row's first digit (`RL_BINS`).
const BINS: usize = 2048;
/// Zeroed bytes the launch needs for `rows` rows (bin counts and cursors), laid out by the caller
/// with the call's other zeroed state: none where [`rank_list_slice`] never serves that many rows.
pub fn zeroed_bytes(rows: u64) -> usize {
    match rows <= RANK_LIST_MAX_ROWS {
        true => rows as usize * 2 * BINS * 4,
        false => 0,
    }
}

/// Composites the launch sorts by bin for `rows` rows of k outputs from buffers of `cap`.
pub fn bucket_len(rows: u64, k: u64, cap: u64) -> usize {
    (rows * cap.max(k)) as usize
}

/// Where the rows' lists lie: the filter's buffer with each row's record (`RowRun`: length, status,
/// largest kept key) and threshold (`RowSel.tmin`), and the fallback's composites (k a row).
pub struct Lists<'a> {
    pub buffer: &'a Buffer,
    pub run: &'a Dev<u8>,
    pub sel: &'a Dev<u8>,
    pub comps: &'a Dev<u64>,
}

/// Writes the k largest of every row, values descending, into `vals` and `idx` (k a row): from the
/// buffer where the row passed, from the fallback's composites where it fell back. `counts`:
/// [`zeroed_bytes`] zeroed bytes; `bucket`: [`bucket_len`] composites. A cooperative launch: the
/// caller checks that the arena allows one.
#[allow(clippy::too_many_arguments)]
pub fn launch(
    arena: &Arena,
    input: &Input,
    shape: &Shape,
    (k, slice): (u64, u64),
    lists: &Lists,
    counts: u64,
    bucket: &Dev<u64>,
    (vals, idx): (u64, u64),
) -> Result<()> {
    let cap = lists.buffer.cap;
    let args = RankListArgs {
        x: input.ptr,
        n: shape.n,
        k,
        rows: shape.rows,
        slice,
        ib: shape.ib as i32,
        tb: (shape.kb + shape.ib) as i32,
        keys: lists.buffer.keys.ptr,
        idx: lists.buffer.idx.ptr,
        cap,
        run: lists.run.ptr,
        sel: lists.sel.ptr,
        comps: lists.comps.ptr,
        counts,
        bucket: bucket.ptr,
        vals,
        out: idx,
    };
    let f = arena.func(Family::Select, &format!("rank_lists_{}", input.suffix))?;
    // Every block of a cooperative launch must be resident at once.
    let per_sm = arena.blocks_per_sm(&f, THREADS)?.max(1);
    let items =
        (shape.rows * cap.max(k).div_ceil(THREADS as u64)).max(shape.rows * k.div_ceil(slice));
    let grid = items.clamp(1, u64::from(per_sm * arena.sms));
    let mut p = Params::default();
    p.push(&args);
    // SAFETY: RankListArgs is the kernel's parameter; the grid fits the device at its occupancy, and
    // every range it names is live for the call.
    unsafe { arena.launch(&f, grid, THREADS, &p, true) }
}
