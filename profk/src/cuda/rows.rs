//! Row-wise selection with one block per row (kernels/rows.cu): a histogram pass, a pass that keeps
//! the threshold bin in shared memory and an exact selection over it, for many rows or short ones.
//! Rows whose threshold bin overflows the shared buffer go to the dense radix selection, on the
//! device, in the same call.
use super::abi::{RowList, ROW_FALLBACK};
use super::launch::{Arena, Arg, Dev};
use super::module::Family;
use super::select::{SelState, Selection, Source};
use super::{Input, Shape};
use crate::Result;

/// Longest row the kernel takes. A block reads its row twice; the second read comes from L2 while
/// the rows in flight (two or more per SM) fit in it, which holds up to rows of 2^15 f32 on the
/// H200's 50 MB. Measured on the H200 (2026-12-01, `profk bench --device cuda --row-shapes`), the kernel
/// as it stands is slower than the sampled path on rows of 2^15 and more (masked 8192×32768, k = 64:
/// 2.09 ms against 1.41; 1024×2^18: 1.59 against 0.70), so it serves only the short rows below.
pub const MAX_N: u64 = SHORT_N;
/// Rows this short take the kernel even when they are few: one block reads such a row in about a
/// microsecond, less than one of the launches the other paths chain.
pub const SHORT_N: u64 = 1 << 14;
/// Threads of a block and elements of its shared buffer (kernels/rows.cu).
const THREADS: u32 = 256;
/// Bytes of rows a launch keeps in flight: most of them are still in L2 for the second pass.
const IN_FLIGHT_BYTES: u64 = 32 << 20;

/// Whether the row kernel serves this shape: rows up to [`MAX_N`], enough of them to fill the device
/// (or rows short enough that one block finishes them quickly), composites of at most 64 bits.
pub fn fits(shape: &Shape, k: u64, sms: u32) -> bool {
    k > 0
        && shape.n <= MAX_N
        && shape.kb + shape.ib <= 64
        && (shape.rows >= u64::from(sms) || shape.n <= SHORT_N)
}

/// Queues the selection of every row: k row-local indices per row (any order) in the returned
/// slots. `run` gets each row's status; the NaN count goes to `global` when `count_nan`.
pub fn select(
    arena: &mut Arena,
    input: &Input,
    shape: &Shape,
    k: u64,
    count_nan: bool,
    run: &Dev<u8>,
    global: &Dev<u8>,
) -> Result<Dev<u64>> {
    let rows = shape.rows as usize;
    let out = arena.alloc::<u64>(rows * k as usize)?;
    let row_bytes = shape.n * u64::from(shape.kb / 8);
    let per_sm = (IN_FLIGHT_BYTES / (u64::from(arena.sms) * row_bytes.max(1))).clamp(2, 8);
    let grid = shape.rows.clamp(1, per_sm * u64::from(arena.sms));
    arena.launch_args(
        Family::Rows,
        &format!("rows_topk_{}", input.suffix),
        grid,
        THREADS,
        &[
            Arg::U64(input.ptr),
            Arg::U64(shape.n),
            Arg::U64(shape.rows),
            Arg::U64(k),
            Arg::I32(input.mag as i32),
            Arg::I32(shape.ib as i32),
            Arg::I32(count_nan as i32),
            Arg::U64(out.ptr),
            Arg::U64(run.ptr),
            Arg::U64(global.ptr),
        ],
    )?;
    // The rows that fell back (a threshold bin over the buffer: heavy ties), exactly on the dense
    // input; the launches skip every other row.
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
    fallback.init(k)?;
    fallback.threshold_from_init(&Source::Dense, true)?;
    fallback.compact(&Source::Dense, &out, k, run)?;
    Ok(out)
}
