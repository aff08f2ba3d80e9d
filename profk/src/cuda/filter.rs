//! Stage 3 (kernels/filter.cu): one pass per pending row, buffer fill, exact R and the device-side
//! check.

use super::abi::{AccArgs, AccFilterArgs, FilterArgs, RowList};
use super::launch::{Arena, Dev};
use super::{module::Family, Input, Shape};
use crate::{work_split::filter_chunk, Result};

/// Bytes of the input a first attempt's blocks ask L2 for, together, while the sample's threshold
/// is selected: about half of the H200's 50 MB L2, so that the pass finds them there before the
/// streaming loads push them out. A benchmark may set it (`tuning.prefetch_mib`, 0: none).
const PREFETCH_BYTES: u64 = 24 << 20;

pub struct Buffer {
    pub keys: Dev<u32>,
    pub idx: Dev<u64>,
    pub cap: u64,
}

pub struct Pass<'a> {
    pub state_sel: &'a Dev<u8>,
    pub use_tmin: bool,
    pub run: &'a Dev<u8>,
    pub global: &'a Dev<u8>,
    pub count_nan: bool,
    pub last_attempt: bool,
    pub approximate: bool,
    pub rows: RowList,
    /// Where the pass lists every row by status once it has finished them all (3 x rows ids, then
    /// the 3 counts), in place of a launch of its own.
    pub lists: Option<(u64, u64)>,
    /// One row: where the pass counts its kept keys by bin, for the buffer's selection; 0: none.
    pub bins: u64,
}

pub fn run(
    arena: &Arena,
    input: &Input,
    shape: &Shape,
    k: u64,
    buf: &Buffer,
    p: &Pass,
) -> Result<()> {
    let blocks = 2 * arena.sms as u64;
    let chunk = filter_chunk(
        shape.rows,
        shape.n,
        blocks,
        buf.cap,
        arena.tuning.filter_chunk,
    );
    let chunks_per_row = shape.n.div_ceil(chunk).max(1);
    let grid = (shape.rows * chunks_per_row).clamp(1, blocks);
    let prefetch = arena
        .tuning
        .prefetch_mib
        .map_or(PREFETCH_BYTES, |mib| mib << 20);
    let args = FilterArgs {
        x: input.ptr,
        n: shape.n,
        rows: shape.rows,
        mag: input.mag as i32,
        ib: shape.index_bits as i32,
        use_tmin: p.use_tmin as i32,
        count_nan: p.count_nan as i32,
        cap: buf.cap,
        k,
        chunk,
        cpr: chunks_per_row,
        sel: p.state_sel.ptr,
        run: p.run.ptr,
        bkeys: buf.keys.ptr,
        bidx: buf.idx.ptr,
        global: p.global.ptr,
        last_attempt: p.last_attempt as i32,
        approximate: p.approximate as i32,
        list: p.rows,
        lists: p.lists.map_or(0, |l| l.0),
        counts: p.lists.map_or(0, |l| l.1),
        prefetch: (prefetch / grid).next_multiple_of(128),
        bins: p.bins,
    };
    arena.launch_struct(
        Family::Filter,
        &format!("filter_{}", input.suffix),
        grid,
        512,
        &args,
    )
}

/// The first attempt fused with the accumulation (one row: the flat residual): writes the updated
/// residual and keeps the candidates, as [`run`] does on a dense input.
pub fn run_accumulate(
    arena: &Arena,
    acc: &AccArgs,
    input: &Input,
    shape: &Shape,
    k: u64,
    buf: &Buffer,
    p: &Pass,
) -> Result<()> {
    let args = AccFilterArgs {
        acc: *acc,
        sel: p.state_sel.ptr,
        run: p.run.ptr,
        bkeys: buf.keys.ptr,
        bidx: buf.idx.ptr,
        global: p.global.ptr,
        cap: buf.cap,
        k,
        mag: input.mag as i32,
        ib: shape.index_bits as i32,
        use_tmin: p.use_tmin as i32,
        count_nan: p.count_nan as i32,
        last_attempt: p.last_attempt as i32,
        approximate: p.approximate as i32,
        pad: [0; 2],
    };
    let grid = acc.nchunks.clamp(1, 2 * arena.sms as u64);
    arena.launch_struct(Family::Accumulate, "acc_filter", grid, 512, &args)
}
