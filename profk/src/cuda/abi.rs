//! Kernel argument records, `#[repr(C)]` mirrors of the structs in `kernels/*.cu` and `common.cuh`.
use candle_core::cuda::cudarc::driver::DeviceRepr;

/// Bytes of `RowSel` (one radix selection's state for one row).
pub const ROW_SEL_BYTES: usize = 48;
/// Bytes of `RowRun` (counter, R, output fill, status, attempts, failure counts of one row).
pub const ROW_RUN_BYTES: usize = 48;
/// Bytes of `Global` (NaN count, inverted first NaN index, the work counter of a launch that deals
/// its items, the rows a filter pass has finished).
pub const GLOBAL_BYTES: usize = 32;

pub const ROW_PENDING: u32 = 0;
pub const ROW_OK: u32 = 1;
pub const ROW_FALLBACK: u32 = 2;

/// Bins of the filter's histogram of one row's kept keys.
pub const FILTER_BINS: usize = crate::kernel_defines::common::FILTER_BINS as usize;
/// Bytes of that histogram with the selection's two counters after it (a u64 fill, a u32 arrival
/// count), rounded to 8.
pub const FILTER_BINS_BYTES: usize = (FILTER_BINS + 4) * 4;
/// Composites of one bin the buffer's selection puts aside.
pub const BIN_EDGE_CAP: usize = crate::kernel_defines::select::BIN_EDGE_CAP as usize;

/// `RowRun` as read back by the host.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RowRun {
    pub counter: u64,
    pub retained: u64,
    pub out_count: u64,
    pub status: u32,
    pub attempts: u32,
    pub arrivals: u32,
    pub recall_fail: u32,
    pub overflow: u32,
    /// The largest key the filter kept this attempt.
    pub max_key: u32,
}

/// The rows a launch works on: a device list of row ids and its device count, or (zeros) all rows.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RowList {
    pub ids: u64,
    pub count: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SelSrc {
    pub x: u64,
    pub n: u64,
    /// Whether the list is a filter's buffer whose keys lie between its row's threshold
    /// (`RowSel.tmin`) and the largest kept key (`RowRun.max_key`).
    pub bounded: i32,
    pub mag: i32,
    pub lkeys: u64,
    pub lidx: u64,
    pub lcap: u64,
    pub lrun: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SelArgs {
    pub src: SelSrc,
    pub rows: u64,
    pub chunk: u64,
    pub cpr: u64,
    pub ib: i32,
    pub lo: i32,
    pub width: i32,
    pub allow_done: i32,
    pub sel: u64,
    pub hist: u64,
    pub list: RowList,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FilterArgs {
    pub x: u64,
    pub n: u64,
    pub rows: u64,
    pub mag: i32,
    pub ib: i32,
    pub use_tmin: i32,
    pub count_nan: i32,
    pub cap: u64,
    pub k: u64,
    pub chunk: u64,
    pub cpr: u64,
    pub sel: u64,
    pub run: u64,
    pub bkeys: u64,
    pub bidx: u64,
    pub global: u64,
    pub last_attempt: i32,
    pub approximate: i32,
    pub list: RowList,
    /// Where the pass lists the rows by status (3 x rows ids) and their counts; 0: not by the pass.
    pub lists: u64,
    pub counts: u64,
    /// Bytes of its first item each block asks L2 for before the kernel before it has finished
    /// (first attempts only; 0: none).
    pub prefetch: u64,
    /// One row: where the pass counts its kept keys by bin (`FILTER_BINS` counts); 0: not counted.
    pub bins: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SampleArgs {
    pub x: u64,
    pub n: u64,
    pub rows: u64,
    pub mag: i32,
    pub half_bits: i32,
    pub s: u64,
    pub seed: u64,
    pub attempt: u32,
    pub pad: u32,
    pub skeys: u64,
    pub sidx: u64,
    pub list: RowList,
}

/// A work item of the accumulation pass: `len` coordinates of span `tensor` from flat offset
/// `flat`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct AccChunk {
    pub flat: u64,
    pub len: u32,
    pub tensor: u32,
}

/// The accumulation `residual += g` (or the DGC velocity update) over the spans.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct AccArgs {
    pub residual: u64,
    pub velocity: u64,
    pub grads: u64,
    pub starts: u64,
    pub chunks: u64,
    pub nchunks: u64,
    pub n: u64,
    pub spans: u32,
    pub mu: f32,
}

/// The first Prof-K attempt fused with the accumulation.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct AccFilterArgs {
    pub acc: AccArgs,
    pub sel: u64,
    pub run: u64,
    pub bkeys: u64,
    pub bidx: u64,
    pub global: u64,
    pub cap: u64,
    pub k: u64,
    pub mag: i32,
    pub ib: i32,
    pub use_tmin: i32,
    pub count_nan: i32,
    pub last_attempt: i32,
    pub approximate: i32,
    pub pad: [i32; 2],
}

/// The sorted top-k of few rows from their lists (kernels/rank_list.cuh).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RankListArgs {
    pub x: u64,
    pub n: u64,
    pub k: u64,
    pub rows: u64,
    pub slice: u64,
    pub ib: i32,
    pub tb: i32,
    pub keys: u64,
    pub idx: u64,
    pub cap: u64,
    pub run: u64,
    pub sel: u64,
    pub comps: u64,
    /// Zeroed: rows x 2048 bin counts, then as many cursors.
    pub counts: u64,
    /// rows x max(cap, k) composites.
    pub bucket: u64,
    pub vals: u64,
    pub out: u64,
    /// One row: the filter's histogram of its kept keys (`FILTER_BINS` counts), or 0.
    pub bins: u64,
    /// Keys by magnitude: a fallen-back row without the fallback's composites is read from the
    /// input.
    pub mag: i32,
    pub pad: i32,
}

// SAFETY: plain-old-data records with the C layout of their kernel-side twins.
unsafe impl DeviceRepr for AccChunk {}
unsafe impl DeviceRepr for AccArgs {}
unsafe impl DeviceRepr for AccFilterArgs {}
unsafe impl DeviceRepr for SelArgs {}
unsafe impl DeviceRepr for FilterArgs {}
unsafe impl DeviceRepr for SampleArgs {}
unsafe impl DeviceRepr for RankListArgs {}

// The records' sizes, checked where they are compiled: here by rustc, and by nvcc in the kernels'
// `static_assert`s with the same numbers (a field added on one side only fails the build).
const _: () = {
    use std::mem::size_of;
    assert!(size_of::<RowRun>() == ROW_RUN_BYTES);
    assert!(size_of::<RowList>() == 16);
    assert!(size_of::<SelSrc>() == 56);
    assert!(size_of::<SelArgs>() == 128);
    assert!(size_of::<FilterArgs>() == 168);
    assert!(size_of::<AccChunk>() == 16);
    assert!(size_of::<RankListArgs>() == 144);
    assert!(size_of::<AccArgs>() == 64);
    assert!(size_of::<AccFilterArgs>() == 152);
    assert!(size_of::<SampleArgs>() == 88);
};
