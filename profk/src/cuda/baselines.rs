//! The baselines the CUDA path also runs: the `sort` selector (CUB's sort of every row, then the
//! first k), the dense radix selection of the `select` and `radix` selectors and of Prof-K's shapes
//! too small to sample, and the NaN scan both need (Prof-K's passes count NaNs themselves).

use super::abi::RowList;
use super::launch::{Arena, Arg, Dev};
use super::module::Family;
use super::select::{SelState, Selection, Source};
use super::{sort, Input, Shape};
use crate::{NanPolicy, Result, TopKOptions};

/// Counts the input's NaNs into `global` where they are an error.
pub fn nan_scan(
    arena: &Arena,
    input: &Input,
    shape: &Shape,
    opts: &TopKOptions,
    global: &Dev<u8>,
) -> Result<()> {
    if opts.nan != NanPolicy::Error {
        return Ok(());
    }
    let total = shape.rows * shape.n;
    arena.launch_args(
        Family::Baselines,
        &format!("nan_scan_{}", input.suffix),
        arena.grid_for(total, 256, 16),
        256,
        &[Arg::U64(input.ptr), Arg::U64(total), Arg::U64(global.ptr)],
    )
}

/// `sort`: CUB radix sort of every row, then the first k.
pub fn sort(arena: &mut Arena, input: &Input, shape: &Shape, k: u64) -> Result<Dev<u64>> {
    let (rows, n) = (shape.rows as usize, shape.n as usize);
    let total = shape.rows * shape.n;
    let grid = arena.grid_for(total, 256, 16);
    let out = arena.alloc::<u64>(rows * k as usize)?;
    let (sorted, index_bits_or_none) = if shape.key_bits + shape.index_bits <= 64 {
        let c = arena.alloc::<u64>(total as usize)?;
        arena.launch_args(
            Family::Baselines,
            &format!("all_composite_{}", input.suffix),
            grid,
            256,
            &[
                Arg::U64(input.ptr),
                Arg::U64(shape.n),
                Arg::U64(total),
                Arg::I32(input.mag as i32),
                Arg::I32(shape.index_bits as i32),
                Arg::U64(c.ptr),
            ],
        )?;
        (
            sort::sort_keys_u64(arena, c, rows, n, true, shape.key_bits + shape.index_bits)?,
            shape.index_bits as i32,
        )
    } else {
        let keys = arena.alloc::<u32>(total as usize)?;
        let idx = arena.alloc::<u64>(total as usize)?;
        arena.launch_args(
            Family::Baselines,
            &format!("all_keys_{}", input.suffix),
            grid,
            256,
            &[
                Arg::U64(input.ptr),
                Arg::U64(shape.n),
                Arg::U64(total),
                Arg::I32(input.mag as i32),
                Arg::U64(keys.ptr),
                Arg::U64(idx.ptr),
            ],
        )?;
        (sort::sort_pairs_desc(arena, keys, idx, rows, n)?, -1)
    };
    arena.launch_args(
        Family::Baselines,
        "take_head",
        arena.grid_for(shape.rows * k, 256, 16),
        256,
        &[
            Arg::U64(sorted.ptr),
            Arg::U64(shape.n),
            Arg::U64(k),
            Arg::U64(shape.rows),
            Arg::I32(index_bits_or_none),
            Arg::U64(out.ptr),
        ],
    )?;
    Ok(out)
}

/// The exact top-k of every row by a radix selection over the whole input: its k-th largest
/// composite, then the k at or above it.
pub fn dense(
    arena: &mut Arena,
    input: &Input,
    shape: &Shape,
    k: u64,
    run: &Dev<u8>,
) -> Result<Dev<u64>> {
    let rows = shape.rows as usize;
    let state = SelState::new(arena, rows)?;
    let out = arena.alloc::<u64>(rows * k as usize)?;
    let selection = Selection {
        arena,
        input,
        shape: *shape,
        state: &state,
        rows: RowList::default(),
    };
    selection.threshold(&Source::Dense, k, true)?;
    selection.compact(&Source::Dense, &out, k, run, None)?;
    Ok(out)
}
