//! Stage 1 (kernels/sample.cu): S distinct indices per pending row by a keyed bijection, gathered.

use super::abi::{AccArgs, RowList, SampleArgs};
use super::launch::{Arena, Dev, Params};
use super::{module::Family, Input, Shape};
use crate::Result;

/// Largest list one block selects in registers (1024 threads × 16): the GPU plan's fused sample.
pub const FUSED_MAX_SAMPLE: u64 = crate::select::GPU_FUSED_SAMPLE;
/// Largest list the 256-thread variant takes (256 × 16): four times as many rows resident at once.
pub const SMALL_MAX: u64 = 4096;

/// Block size and kernel-name suffix of the in-block selection for a list of `len` elements.
pub fn block_variant(len: u64) -> (u32, &'static str) {
    if len <= SMALL_MAX {
        (256, "_small")
    } else {
        (1024, "")
    }
}

/// The sample's arguments; `keys`/`idx` are null when the fused kernel keeps the sample in
/// registers.
#[allow(clippy::too_many_arguments)]
pub fn args(
    input: &Input,
    shape: &Shape,
    s: u64,
    seed: u64,
    attempt: u32,
    rows: RowList,
    keys: u64,
    idx: u64,
) -> SampleArgs {
    SampleArgs {
        x: input.ptr,
        n: shape.n,
        rows: shape.rows,
        mag: input.mag as i32,
        half_bits: crate::work_split::feistel_half_bits(shape.n),
        s,
        seed,
        attempt,
        pad: 0,
        skeys: keys,
        sidx: idx,
        list: rows,
    }
}

/// Stages 1 and 2 in one launch (S <= FUSED_MAX_SAMPLE, composites of at most 64 bits): the t-th
/// largest sampled composite of every pending row goes to its `RowSel.tmin`. With `acc`, the
/// sampled values are those of the accumulation, computed on the fly (one row: the flat residual).
#[allow(clippy::too_many_arguments)]
pub fn draw_and_select(
    arena: &Arena,
    input: &Input,
    shape: &Shape,
    s: u64,
    t: u64,
    seed: u64,
    attempt: u32,
    rows: RowList,
    sel: &Dev<u8>,
    acc: Option<&AccArgs>,
) -> Result<()> {
    let sample_args = args(input, shape, s, seed, attempt, rows, 0, 0);
    let (threads, variant) = block_variant(s);
    let f = match acc {
        Some(_) => arena.func(Family::Accumulate, &format!("acc_sample_select{variant}"))?,
        None => arena.func(
            Family::Sample,
            &format!("sample_select{variant}_{}", input.suffix),
        )?,
    };
    let (selp, t32, index_bits, composite_bits) = (
        sel.ptr,
        t as u32,
        shape.index_bits as i32,
        (shape.key_bits + shape.index_bits) as i32,
    );
    let mut p = Params::default();
    p.push(&sample_args)
        .push(&selp)
        .push(&t32)
        .push(&index_bits)
        .push(&composite_bits);
    if let Some(acc) = acc {
        p.push(acc);
    }
    let grid = shape.rows.clamp(1, (2048 / threads * 2 * arena.sms) as u64);
    // SAFETY: (SampleArgs, RowSel*, u32, int, int[, AccArgs]) is the kernel's signature.
    unsafe { arena.launch(&f, grid, threads, &p, false) }
}

pub use crate::select::{
    gpu_spread_shape as spread_shape, gpu_spread_shape_per as spread_shape_per,
    GPU_SPREAD_THREADS as SPREAD_THREADS,
};

/// Stages 1 and 2 in one launch for rows too few to fill the device (composites of at most 64
/// bits): each row's sample spread over `spread_shape(s, t)` blocks, each keeping its slice's t
/// largest in `cand` (at least `rows * bpr * t` long), the row's last block selecting the t-th
/// largest of those into its `RowSel.tmin`. A plain launch: it may be captured.
#[allow(clippy::too_many_arguments)]
pub fn spread_select(
    arena: &Arena,
    input: &Input,
    shape: &Shape,
    (s, t): (u64, u64),
    (bpr, per): (u64, u64),
    seed: u64,
    attempt: u32,
    rows: RowList,
    sel: &Dev<u8>,
    cand: &Dev<u64>,
) -> Result<()> {
    let sample_args = args(input, shape, s, seed, attempt, rows, 0, 0);
    let f = arena.func(
        Family::Sample,
        &format!("sample_spread_p{per}_{}", input.suffix),
    )?;
    let (selp, candp) = (sel.ptr, cand.ptr);
    let (t32, bpr32) = (t as u32, bpr as u32);
    let (index_bits, composite_bits) = (
        shape.index_bits as i32,
        (shape.key_bits + shape.index_bits) as i32,
    );
    let mut p = Params::default();
    p.push(&sample_args)
        .push(&selp)
        .push(&candp)
        .push(&t32)
        .push(&bpr32)
        .push(&index_bits)
        .push(&composite_bits);
    // SAFETY: (SampleArgs, RowSel*, u64*, u32, u32, int, int) is the kernel's signature; every
    // row's candidates lie inside `cand`.
    unsafe { arena.launch(&f, shape.rows * bpr, SPREAD_THREADS as u32, &p, false) }
}

/// Stage 1 alone: the sampled keys and indices of every pending row (of the accumulation with
/// `acc`).
#[allow(clippy::too_many_arguments)]
pub fn draw(
    arena: &Arena,
    input: &Input,
    shape: &Shape,
    s: u64,
    seed: u64,
    attempt: u32,
    rows: RowList,
    keys: &Dev<u32>,
    idx: &Dev<u64>,
    acc: Option<&AccArgs>,
) -> Result<()> {
    let args = args(input, shape, s, seed, attempt, rows, keys.ptr, idx.ptr);
    let grid = arena.grid_for(shape.rows * s, 256, 16);
    if let Some(acc) = acc {
        let f = arena.func(Family::Accumulate, "acc_sample")?;
        let mut p = Params::default();
        p.push(&args).push(acc);
        // SAFETY: (SampleArgs, AccArgs) is acc_sample's signature.
        return unsafe { arena.launch(&f, grid, 256, &p, false) };
    }
    arena.launch_struct(
        Family::Sample,
        &format!("sample_{}", input.suffix),
        grid,
        256,
        &args,
    )
}
