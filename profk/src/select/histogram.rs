//! Which calls the CUDA path serves by the histogram selection (kernels/rows.cu) instead of
//! sampling: a histogram of the top key bits, a second read that keeps the threshold bin, an exact
//! selection inside it; one block per row carries a guessed key from row to row and reads a row
//! once when the bin holds. It has no failure probability and no redraw.

/// Longest row one block takes when the rows fill the device.
pub const ONE_BLOCK_MAX_N: u64 = 1 << 15;
/// Longer rows, up to this, take one block each when k is at most 2^-8 of the row: a block guesses
/// a key a margin above the k-th largest (from a sample of its first row, then from the row
/// before), keeps what lies above it in shared memory and reads most rows once. With the guess a
/// whole histogram bin, 1024 x 2^18 at k = 64 already ran faster than sampled (H200, 2026-12-02,
/// `profk bench --device cuda --row-shapes`: f32 0.476 ms against 0.682, bf16 0.493 against 0.521;
/// log 2026-12-02-h200-profk-carried-bin.txt, docs/perf/logs/ at commit 0107786), but at k = 1024 a
/// bin's elements no longer fit and each row was read twice (f32 1.021 ms against 0.907 sampled);
/// docs/perf/profk-cuda.md has the key guess's figures.
pub const ONE_BLOCK_LONG_MAX_N: u64 = 1 << 18;
pub const ONE_BLOCK_LONG_K_SHIFT: u32 = 8;
/// Rows this short take one block each even when they are few: one block reads such a row in about
/// a microsecond, less than one of the launches the sampled path chains.
pub const SHORT_N: u64 = 1 << 14;
/// Most elements, f32 and 16-bit, of an input whose few rows are split over every SM. Measured on
/// the H200 (2026-12-02, `profk bench --device cuda --row-shapes`, the split layout beside the
/// sampled path in one call): f32 single rows of 2^20, 2^22 and 2^24 and 16 x 2^20 split faster
/// (0.169 / 0.172 / 0.201 / 0.112 ms against 0.189 / 0.227 / 0.228 / 0.120); bf16 splits faster at
/// 2^22 (0.140 against 0.157) but not at 2^24 or 16 x 2^20 (0.174 against 0.153, 0.105 against
/// 0.088), where the sampled path reads half the bytes of f32 and the split kernels do the same
/// work per element. Once the sampled path's output and buffer selection took one launch each
/// (2026-12-02, same command), f32 still split faster at 2^22 (0.096 against 0.101 ms, index order)
/// but no longer at 2^24 (0.120 against 0.108) or 16 x 2^20 (0.099 against 0.095).
pub const SPLIT_MAX_ELEMENTS_F32: u64 = 1 << 23;
pub const SPLIT_MAX_ELEMENTS_16: u64 = 1 << 22;

/// How the histogram selection lays out a call's rows on the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HistogramPath {
    /// One block per row, the histogram and the threshold bin in shared memory, one launch.
    OneBlockPerRow,
    /// Few long rows, each split over many blocks, a histogram and a candidate buffer per row in
    /// global memory, two launches.
    Split,
}

impl HistogramPath {
    pub fn name(self) -> &'static str {
        match self {
            HistogramPath::OneBlockPerRow => "one block per row",
            HistogramPath::Split => "rows split over the SMs",
        }
    }
}

/// The histogram path for `rows` rows of `n` elements of `elem_bytes` bytes, selecting `k` > 0 on
/// a device of `sms` SMs, or `None` when the sampled path serves the call (long rows that fill the
/// device, large inputs, composites over 64 bits).
pub fn gpu_histogram_path(
    rows: u64,
    n: u64,
    k: u64,
    elem_bytes: u64,
    sms: u32,
) -> Option<HistogramPath> {
    if k == 0 || rows == 0 || 8 * elem_bytes + u64::from(super::index_bits(n)) > 64 {
        return None;
    }
    let layout = histogram_layout(rows, n, sms);
    let split_max = if elem_bytes >= 4 {
        SPLIT_MAX_ELEMENTS_F32
    } else {
        SPLIT_MAX_ELEMENTS_16
    };
    let served = match layout {
        HistogramPath::OneBlockPerRow => {
            n <= ONE_BLOCK_MAX_N || (n <= ONE_BLOCK_LONG_MAX_N && k << ONE_BLOCK_LONG_K_SHIFT <= n)
        }
        HistogramPath::Split => rows.saturating_mul(n) <= split_max,
    };
    served.then_some(layout)
}

/// How the histogram selection lays out `rows` rows of `n`, whatever their size (benchmarks time it
/// where [`gpu_histogram_path`] leaves it): one block per row when the rows fill the device or are
/// short, else each row split over many blocks.
pub fn histogram_layout(rows: u64, n: u64, sms: u32) -> HistogramPath {
    if rows >= u64::from(sms) || n <= SHORT_N {
        HistogramPath::OneBlockPerRow
    } else {
        HistogramPath::Split
    }
}

#[cfg(test)]
mod tests {
    use super::{gpu_histogram_path, HistogramPath::*};

    #[test]
    fn paths_by_shape() {
        let h200 = |rows, n, elem| gpu_histogram_path(rows, n, 64, elem, 132);
        // The masked block-selection rows, short rows of any count, few long rows.
        assert_eq!(h200(8192, 1 << 15, 4), Some(OneBlockPerRow));
        assert_eq!(h200(3, 5000, 4), Some(OneBlockPerRow));
        assert_eq!(h200(1, 1 << 23, 4), Some(Split));
        assert_eq!(h200(8, 1 << 20, 4), Some(Split));
        // Rows of up to 2^18 that fill the device when k is at most 2^-8 of them.
        assert_eq!(h200(1024, 1 << 18, 4), Some(OneBlockPerRow));
        assert_eq!(h200(1024, 1 << 18, 2), Some(OneBlockPerRow));
        assert_eq!(
            gpu_histogram_path(1024, 1 << 18, 1024, 4, 132),
            Some(OneBlockPerRow)
        );
        assert_eq!(gpu_histogram_path(1024, 1 << 18, 1025, 4, 132), None);
        assert_eq!(gpu_histogram_path(1024, 1 << 17, 1024, 4, 132), None);
        // Longer rows that fill the device, inputs past L2, composites over 64 bits: sampled.
        assert_eq!(h200(1024, 1 << 19, 4), None);
        assert_eq!(h200(1, 1 << 28, 4), None);
        assert_eq!(h200(1, 1 << 24, 4), None);
        assert_eq!(h200(16, 1 << 20, 4), None);
        assert_eq!(h200(128, 1 << 20, 4), None);
        assert_eq!(gpu_histogram_path(1, (1 << 32) + 1, 1, 4, 132), None);
        assert_eq!(gpu_histogram_path(8192, 1 << 15, 0, 4, 132), None);
        // 16-bit inputs split only up to 2^22 elements.
        assert_eq!(h200(1, 1 << 22, 2), Some(Split));
        assert_eq!(h200(1, 1 << 24, 2), None);
        assert_eq!(h200(16, 1 << 20, 2), None);
    }
}
