//! The sorted top-k of few rows straight from their lists (kernels/rank_list.cuh): each passed
//! row's buffer, each fallen-back row's k composites. One launch in place of the buffer's radix
//! selection and the ranking of its k outputs: cooperative where the lists are counted and
//! scattered over the grid, plain where each block reads its row's whole list ([`reads_whole`]).
//! The plain launch also ranks a fallen-back row from its input, so that no fallback launch comes
//! before it.
use super::launch::{Arena, Dev, Params};
use super::{abi::RankListArgs, filter::Buffer};
use super::{module::Family, Input, Shape};
use crate::{tuning::Tuning, work_split::RANK_LIST_MAX_ROWS, Result};

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

/// Composites the launch sorts by bin for `rows` rows of k outputs from buffers of `cap` (none
/// where it reads the lists whole).
pub fn bucket_len(tuning: &Tuning, rows: u64, k: u64, cap: u64) -> usize {
    match reads_whole(tuning, rows, k, cap) {
        true => 0,
        false => (rows * cap.max(k)) as usize,
    }
}

/// Whether each block reads its row's whole list (a plain launch, kernel `rank_whole`, and the
/// filter counts the row's kept keys by bin for it) rather than the grid counting and scattering
/// the lists by their first digit (a cooperative launch with two grid barriers): one row whose
/// list, its buffer or k, is short ([`crate::select::gpu_whole_list`]). Each block reads it once,
/// to gather its slice's bins of the filter's histogram: at 2^24 (k = 8192, about 24 600 kept) the
/// 128 blocks read about 13 MB from L2, against two grid barriers, the count and the scatter it
/// saves. The plain launch also ranks a fallen-back row from its input (a few reads of it in every
/// block, milliseconds, which the plan makes rare: [`crate::select::GPU_WHOLE_LIST_EPS_SHARE`]), so
/// no fallback launch comes before it and the fallback's composites are not read. A benchmark may
/// take either on any shape (`tuning.rank_whole`).
pub fn reads_whole(tuning: &Tuning, rows: u64, k: u64, cap: u64) -> bool {
    tuning
        .rank_whole
        .unwrap_or_else(|| crate::select::gpu_whole_list(rows, k, cap))
}

/// Where the rows' lists lie: the filter's buffer with each row's record (`RowRun`: length, status,
/// largest kept key) and threshold (`RowSel.tmin`), and the fallback's composites (k a row; unread
/// where the launch [`reads_whole`]).
pub struct Lists<'a> {
    pub buffer: &'a Buffer,
    pub run: &'a Dev<u8>,
    pub sel: &'a Dev<u8>,
    pub comps: &'a Dev<u64>,
}

/// Writes the k largest of every row, values descending, into `vals` and `idx` (k a row): from the
/// buffer where the row passed, from the fallback's composites (or the input, where the launch
/// [`reads_whole`]) where it fell back. `counts`:
/// [`zeroed_bytes`] zeroed bytes; `bucket`: [`bucket_len`] composites; `bins`: one row's histogram
/// of its kept keys where the filter counted it (else 0). A cooperative launch unless it
/// [`reads_whole`]: the caller checks that the arena allows one.
#[allow(clippy::too_many_arguments)]
pub fn launch(
    arena: &Arena,
    input: &Input,
    shape: &Shape,
    (k, slice): (u64, u64),
    lists: &Lists,
    (counts, bins): (u64, u64),
    bucket: &Dev<u64>,
    (vals, idx): (u64, u64),
) -> Result<()> {
    let cap = lists.buffer.cap;
    let whole = reads_whole(&arena.tuning, shape.rows, k, cap);
    let args = RankListArgs {
        x: input.ptr,
        n: shape.n,
        k,
        rows: shape.rows,
        slice,
        ib: shape.index_bits as i32,
        tb: (shape.key_bits + shape.index_bits) as i32,
        keys: lists.buffer.keys.ptr,
        idx: lists.buffer.idx.ptr,
        cap,
        run: lists.run.ptr,
        sel: lists.sel.ptr,
        // Null: a fallen-back row is read from the input.
        comps: if whole { 0 } else { lists.comps.ptr },
        counts,
        bucket: bucket.ptr,
        vals,
        out: idx,
        bins,
        mag: input.mag as i32,
        pad: 0,
    };
    let mut p = Params::default();
    p.push(&args);
    if whole {
        let f = arena.func(Family::RankList, &format!("rank_whole_{}", input.suffix))?;
        let grid = (shape.rows * k.div_ceil(slice)).max(1);
        // SAFETY: RankListArgs is the kernel's parameter; every range it names is live for the
        // call.
        return unsafe { arena.launch(&f, grid, THREADS, &p, false) };
    }
    let f = arena.func(Family::RankList, &format!("rank_lists_{}", input.suffix))?;
    // Every block of a cooperative launch must be resident at once.
    let per_sm = arena.blocks_per_sm(&f, THREADS)?.max(1);
    let items =
        (shape.rows * cap.max(k).div_ceil(THREADS as u64)).max(shape.rows * k.div_ceil(slice));
    let grid = items.clamp(1, u64::from(per_sm * arena.sms));
    // SAFETY: RankListArgs is the kernel's parameter; the grid fits the device at its occupancy,
    // and every range it names is live for the call.
    unsafe { arena.launch(&f, grid, THREADS, &p, true) }
}
