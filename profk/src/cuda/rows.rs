//! Row-wise selection by a histogram of the keys (kernels/rows.cu): a pass into a histogram of the
//! top key bits, a second read that writes the higher bins out and keeps the threshold bin's
//! elements, and an exact selection over those. Many rows go one block per row, in one launch, with
//! the histogram and the bin in shared memory: a block carries a guessed key from one row to the
//! next and reads a row once when it holds (the elements above it hold the k-th and fit shared
//! memory), selects a row whose bin overflows its buffer from the row itself, and writes the sorted
//! output for k up to 1024. A few long rows are split over every SM, with a histogram and a
//! candidate buffer per row in global memory, in two launches; split rows whose threshold bin
//! overflows its buffer go to the dense radix selection, in the same call.
use super::abi::{RowList, ROW_FALLBACK};
use super::launch::{Arena, Arg, Dev};
use super::module::Family;
use super::select::{SelState, Selection, Source};
use super::{Input, Shape};
use crate::tuning::{HistogramOutput, Tuning};
use crate::{HistogramPath, Result};

use crate::kernel_defines::rows as kernel;

/// Threads of a block and blocks resident on an SM.
const THREADS: u32 = kernel::ROWS_THREADS as u32;
const BLOCKS_PER_SM: u64 = kernel::ROWS_BLOCKS_PER_SM;
/// A split row's state (kernels/rows.cu `SplitRow`: a histogram of `ROWS_BINS` bins and eight
/// counters, u32 words) and the threshold bin's elements it keeps.
const SPLIT_ROW_WORDS: usize = kernel::ROWS_BINS as usize + 8;
const SPLIT_CAP: usize = kernel::SPLIT_CAP as usize;
/// Largest k whose sorted output the one-block kernel writes itself.
const FUSED_MAX_K: u64 = kernel::FUSED_MAX_K;
/// Largest k whose slots that kernel then keeps in shared memory.
const SMEM_SLOTS: u64 = kernel::SMEM_SLOTS;
/// The kernel's benchmark flags: the output left unsorted or out, rows in a fixed order.
const OUT_UNSORTED: i32 = kernel::OUT_UNSORTED as i32;
const OUT_NONE: i32 = kernel::OUT_NONE as i32;
const ROWS_STATIC: i32 = kernel::ROWS_STATIC as i32;

/// Whether a call on `path` selecting k writes its sorted values and indices from the row kernel,
/// with no output launch after it (its sort keys are composite + 1: narrower than 64 bits).
pub fn fused_output(path: HistogramPath, shape: &Shape, k: u64, tuning: &Tuning) -> bool {
    path == HistogramPath::OneBlockPerRow
        && k <= FUSED_MAX_K
        && shape.key_bits + shape.index_bits < 64
        && !tuning.left_out.output
}

/// Blocks a launch keeps resident per SM; benchmarks may set fewer to trade loads in flight
/// against the second pass's hits in L2.
fn blocks_per_sm(tuning: &Tuning) -> u64 {
    match tuning.histogram_blocks_per_sm {
        Some(blocks) => blocks.clamp(1, BLOCKS_PER_SM),
        None => BLOCKS_PER_SM,
    }
}

/// One histogram selection: the input, its rows, k, and the call's records (`run` gets each row's
/// status; the NaN count goes to `global` when `count_nan`).
pub struct Call<'a> {
    pub input: &'a Input,
    pub shape: &'a Shape,
    pub k: u64,
    pub count_nan: bool,
    pub run: &'a Dev<u8>,
    pub global: &'a Dev<u8>,
    /// Where the one-block kernel writes the sorted output ((values, indices), descending), if it
    /// does ([`fused_output`]).
    pub sorted: Option<((u64, u64), bool)>,
}

/// Queues the selection of every row: k row-local indices per row (any order) in the returned
/// slots, or with `call.sorted` on the one-block path and k <= [`SMEM_SLOTS`] only the sorted
/// output (the slots are then not written).
pub fn select(arena: &mut Arena, call: &Call, path: HistogramPath) -> Result<Dev<u64>> {
    let Call {
        input,
        shape,
        k,
        run,
        ..
    } = *call;
    let rows = shape.rows as usize;
    // A block that writes the sorted output of a small k keeps its row's slots in shared memory.
    let slots = if call.sorted.is_some() && path == HistogramPath::OneBlockPerRow && k <= SMEM_SLOTS
    {
        1
    } else {
        rows * k as usize
    };
    let out = arena.alloc::<u64>(slots)?;
    let resident = blocks_per_sm(&arena.tuning) * u64::from(arena.sms);
    match path {
        // Its block finishes every row, the dense selection included.
        HistogramPath::OneBlockPerRow => {
            one_block_per_row(arena, call, &out, resident)?;
            return Ok(out);
        }
        HistogramPath::Split => split_rows(arena, call, &out, resident)?,
    }
    if arena.tuning.left_out.fallback {
        return Ok(out);
    }
    // The split rows that fell back (a threshold bin over the buffer: heavy ties), exactly on the
    // dense input; the launches skip every other row.
    let lists = arena.alloc::<u32>(3 * rows)?;
    let counts = arena.alloc::<u32>(3)?;
    Selection::classify(arena, run, shape.rows, &lists, &counts)?;
    let state = SelState::new(arena, rows)?;
    let arena: &Arena = arena;
    let status = u64::from(ROW_FALLBACK);
    let fallback = Selection {
        arena,
        input,
        shape: *shape,
        state: &state,
        rows: RowList {
            ids: lists.ptr + 4 * status * shape.rows,
            count: counts.ptr + 4 * status,
        },
    };
    fallback.exact(&Source::Dense, &out, k, run, None)?;
    Ok(out)
}

/// Benchmark flags of the one-block kernel: output stages left out (kernels/rows.cu
/// `OUT_UNSORTED`, `OUT_NONE`: the results are then not meaningful), and rows in a fixed order
/// instead of dealt from the call's counter (`ROWS_STATIC`).
fn bench_flags(tuning: &Tuning) -> i32 {
    let output = match tuning.histogram_output {
        HistogramOutput::Full => 0,
        HistogramOutput::Unsorted => OUT_UNSORTED,
        HistogramOutput::None => OUT_NONE,
    };
    let order = match tuning.histogram_static_rows {
        true => ROWS_STATIC,
        false => 0,
    };
    output | order
}

/// One block per row, one launch (`rows_topk`).
fn one_block_per_row(arena: &mut Arena, call: &Call, out: &Dev<u64>, resident: u64) -> Result<()> {
    let (input, shape) = (call.input, call.shape);
    let sorted = call.sorted.unwrap_or(((0, 0), false));
    let flags = i32::from(sorted.1) | bench_flags(&arena.tuning);
    arena.launch_args(
        Family::Rows,
        &format!("rows_topk_{}", input.suffix),
        shape.rows.clamp(1, resident),
        THREADS,
        &[
            Arg::U64(input.ptr),
            Arg::U64(shape.n),
            Arg::U64(shape.rows),
            Arg::U64(call.k),
            Arg::I32(input.mag as i32),
            Arg::I32(shape.index_bits as i32),
            Arg::I32(call.count_nan as i32),
            Arg::U64(out.ptr),
            Arg::U64(call.run.ptr),
            Arg::U64(call.global.ptr),
            Arg::U64(sorted.0 .0),
            Arg::U64(sorted.0 .1),
            Arg::I32(flags),
        ],
    )
}

/// Rows split into parts over every resident block, two launches (`rows_split_hist`,
/// `rows_split_compact`) sharing a zeroed state and a candidate buffer per row.
fn split_rows(arena: &mut Arena, call: &Call, out: &Dev<u64>, resident: u64) -> Result<()> {
    let (input, shape) = (call.input, call.shape);
    let rows = shape.rows as usize;
    let (part, parts) = crate::work_split::row_parts(shape.n, shape.rows, resident);
    let state = arena.zeros::<u32>(rows * SPLIT_ROW_WORDS)?;
    let cand = arena.alloc::<u64>(rows * SPLIT_CAP)?;
    let grid = (shape.rows * parts).clamp(1, resident);
    let common = [
        Arg::U64(input.ptr),
        Arg::U64(shape.n),
        Arg::U64(shape.rows),
        Arg::U64(part),
        Arg::U32(parts as u32),
        Arg::U64(call.k),
        Arg::I32(input.mag as i32),
    ];
    let mut hist = common.to_vec();
    hist.extend([
        Arg::I32(call.count_nan as i32),
        Arg::U64(state.ptr),
        Arg::U64(call.run.ptr),
        Arg::U64(call.global.ptr),
    ]);
    arena.launch_args(
        Family::Rows,
        &format!("rows_split_hist_{}", input.suffix),
        grid,
        THREADS,
        &hist,
    )?;
    let mut compact = common.to_vec();
    compact.extend([
        Arg::I32(shape.index_bits as i32),
        Arg::U64(state.ptr),
        Arg::U64(cand.ptr),
        Arg::U64(out.ptr),
        Arg::U64(call.run.ptr),
    ]);
    arena.launch_args(
        Family::Rows,
        &format!("rows_split_compact_{}", input.suffix),
        grid,
        THREADS,
        &compact,
    )
}
