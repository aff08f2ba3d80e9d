//! How the CUDA path cuts its work over the device's blocks: pure functions of the shape, the
//! buffer's capacity and the SM count. They are compiled and unit-tested on every build, with or
//! without the `cuda` feature; the launches that use them are in `cuda/`.
// Only `cuda/` calls these: without it they are here for their tests.
#![cfg_attr(not(feature = "cuda"), allow(dead_code))]

use crate::tuning::FilterChunk;

/// Elements per work item of one filter block where the rows make many items (a multiple of
/// [`FILTER_STEP`]).
pub const FILTER_CHUNK: u64 = 1 << 16;
/// Elements one filter block loads per step of its loop: `FT` (512) threads × `UNROLL` (4) loads
/// × 8 halves.
pub const FILTER_STEP: u64 =
    crate::kernel_defines::filter::FT * crate::kernel_defines::filter::UNROLL * 8;
/// Elements a filter block stages before it flushes them.
pub const FILTER_STAGE: u64 = crate::kernel_defines::filter::SCAP;
/// Most items a filter block takes when [`filter_items_for_capacity`] splits a row further.
const MAX_ITEMS_PER_BLOCK: u64 = 16;

/// Elements per filter work item: [`FILTER_CHUNK`], except for a few rows (at most a sixteenth of
/// the blocks) that make more items than the grid has blocks. Those are cut into as many items per
/// block as the buffer's capacity `cap` asks for ([`filter_items_for_capacity`]; one unless the
/// buffer is large), of equal length to within a step. (Items of 2^16 left the last round of a pass
/// to a few blocks: at 2^30, 16 of 264 blocks walked a 63rd item alone.) A benchmark may fix the
/// items' length or give each block one (`tuning`) to time either.
pub fn filter_chunk(rows: u64, n: u64, blocks: u64, cap: u64, tuning: FilterChunk) -> u64 {
    if let FilterChunk::Elements(c) = tuning {
        return c.next_multiple_of(FILTER_STEP).max(FILTER_STEP);
    }
    if rows == 0 || rows * 16 > blocks || rows * n.div_ceil(FILTER_CHUNK) <= blocks {
        return FILTER_CHUNK;
    }
    let per_block = match tuning {
        FilterChunk::OnePerBlock => 1,
        _ => filter_items_for_capacity(cap, blocks / rows),
    };
    n.div_ceil(blocks / rows * per_block)
        .next_multiple_of(FILTER_STEP)
}

/// Items a filter block takes of a row spread over `row_blocks` blocks, so that a buffer filled to
/// its capacity `cap` keeps at most three quarters of a stage an item. A stage that fills before
/// its item ends leaves every warp that keeps more an atomic of its own on the row's one counter;
/// the flat row of 2^30 (k = 262144) keeps about 2000 elements a block with one item each, and its
/// pass was 4 % slower than that of the row of 2^30 at k = 8192. Its capacity M = 883544 gives
/// three items a block, at most 1118 elements each.
pub fn filter_items_for_capacity(cap: u64, row_blocks: u64) -> u64 {
    cap.div_ceil(FILTER_STAGE * 3 / 4)
        .div_ceil(row_blocks.max(1))
        .clamp(1, MAX_ITEMS_PER_BLOCK)
}

/// Threads of a selection block.
pub const SELECT_THREADS: u32 = crate::kernel_defines::select::SEL_THREADS as u32;
/// Most elements one selection block histograms per work item.
const SELECT_CHUNK: u64 = 8192;
/// Work items a selection aims for per SM: a few rows of a list (a sample, a buffer) split into
/// chunks small enough to reach every SM, instead of a few blocks each walking 8192 elements. (One
/// item an SM, fewer blocks at each grid barrier, made a single row's buffer selection slower: 27.7
/// against 19.9 µs at 2^30 on the H200.)
const SELECT_ITEMS_PER_SM: u64 = 4;

/// Elements per selection work item: at most 8192, a multiple of the block, and small enough that
/// `rows` rows of `len` elements make four items per SM.
pub fn select_chunk(rows: u64, len: u64, sms: u32) -> u64 {
    (rows * len)
        .div_ceil(SELECT_ITEMS_PER_SM * sms as u64)
        .next_multiple_of(SELECT_THREADS as u64)
        .clamp(SELECT_THREADS as u64, SELECT_CHUNK)
}

/// Fewest output places a block of the sorted lists' launch takes.
const MIN_SLICE: u64 = 64;
/// Most: a block gathers at most 1024 composites (`RL_CAP`), its slice among them. Longer outputs
/// (more slices than blocks) were slower than the selection and a sort: 178 against 139 µs for the
/// flat row of 2^30 with k = 262144 on the H200.
const MAX_SLICE: u64 = 512;
/// Most rows the sorted lists' launch serves: more fill the device with a row's selection and sort
/// each.
pub const RANK_LIST_MAX_ROWS: u64 = 16;

/// The output places a block of the sorted lists' launch ranks for `rows` rows of k outputs: a
/// multiple of 64 small enough that the blocks, one an SM, fill the device once; `None` past
/// [`MAX_SLICE`] or [`RANK_LIST_MAX_ROWS`]. A benchmark may turn the path off (`switched_off`)
/// to time the selection and ranking it replaces.
pub fn rank_list_slice(rows: u64, k: u64, sms: u32, switched_off: bool) -> Option<u64> {
    if rows > RANK_LIST_MAX_ROWS || switched_off {
        return None;
    }
    let slice = (rows * k)
        .div_ceil(u64::from(sms.max(1)))
        .next_multiple_of(MIN_SLICE);
    (slice <= MAX_SLICE).then_some(slice)
}

/// Shortest part of a split row one block of the row kernel reads.
const MIN_PART: u64 = 4096;

/// Part length (a multiple of 64 elements, so that every part of an aligned row starts aligned) and
/// parts per row, so that the rows' parts make about one per resident block.
pub fn row_parts(n: u64, rows: u64, resident: u64) -> (u64, u64) {
    let want = resident.div_ceil(rows.max(1)).max(1);
    let part = n.div_ceil(want).next_multiple_of(64).max(MIN_PART);
    (part, n.div_ceil(part).max(1))
}

/// Half the bit width of the sample's Feistel domain: the smallest even width 2h with 2^(2h) >= n.
pub fn feistel_half_bits(n: u64) -> i32 {
    let bits = 64 - n.saturating_sub(1).leading_zeros();
    bits.div_ceil(2).max(1) as i32
}

/// What a redraw costs a call on the stream when no row needs it: its sample and pass launches, run
/// empty (H200 stage table, 2026-12-05: 2^24 0.064 ms with them, 0.061 without; 5.4–5.6 µs under
/// Nsight Compute).
const REDRAW_LAUNCHES_US: f64 = 4.0;
/// The dense fallback's time in reads of the row at the read floor: the grid's exact radix
/// selection took 21–30 times the floor from 2^24 to 2^30 (H200, 2026-11-30, `radix ms`).
const FALLBACK_READS: f64 = 25.0;
/// The read floor, bytes a µs (4.41 TB/s).
const READ_BYTES_PER_US: f64 = 4.41e6;

/// Attempts the device makes before the dense fallback, for `rows` rows of `n` elements of `bytes`
/// each whose first attempt fails with probability at most `eps` a row. A redraw's launches are
/// queued in every call, whether or not a row failed; without them a failed row goes straight to
/// the dense fallback. One row takes a single attempt where the fallback's expected cost is below
/// the launches saved (2^24 f32: 0.4 µs against 4; 2^28: 6 against 4). A benchmark may fix the
/// count (`forced`: 1 or 2). Batches keep the redraw until they are measured without it.
pub fn device_attempts(rows: u64, n: u64, bytes: u64, eps: f64, forced: Option<u32>) -> u32 {
    if let Some(attempts) = forced {
        return attempts.clamp(1, 2);
    }
    let fallback_us = FALLBACK_READS * (n as f64 * bytes as f64) / READ_BYTES_PER_US;
    match rows == 1 && eps * fallback_us <= REDRAW_LAUNCHES_US {
        true => 1,
        false => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_attempt_where_the_fallback_costs_less_than_the_redraw() {
        assert_eq!(device_attempts(1, 1 << 24, 4, 1e-3, None), 1);
        assert_eq!(device_attempts(1, 1 << 26, 4, 1e-3, None), 1);
        assert_eq!(device_attempts(1, 1 << 28, 4, 1e-3, None), 2);
        assert_eq!(device_attempts(1, 1 << 28, 2, 1e-4, None), 1);
        assert_eq!(device_attempts(1, 1 << 30, 4, 1e-3, None), 2);
        assert_eq!(device_attempts(2, 1 << 20, 4, 1e-3, None), 2);
        assert_eq!(device_attempts(1024, 1 << 18, 4, 1e-6, None), 2);
    }

    #[test]
    fn long_rows_with_small_buffers_make_one_filter_item_per_block() {
        // 2^30 at k = 8192 (M = 257363) over 264 blocks: 264 items of 249 steps, the last one
        // shorter.
        let c = filter_chunk(1, 1 << 30, 264, 257_363, FilterChunk::ByRule);
        assert_eq!(c, 249 * FILTER_STEP);
        assert_eq!((1u64 << 30).div_ceil(c), 264);
        // Two rows of 2^28 share the blocks: 132 items each while their buffers fit the stages.
        let c = filter_chunk(2, 1 << 28, 264, 1 << 17, FilterChunk::ByRule);
        assert!((1u64 << 28).div_ceil(c) <= 132);
        assert!((1u64 << 28).div_ceil(c - FILTER_STEP) > 132);
    }

    #[test]
    fn a_large_buffer_splits_a_long_row_into_more_items() {
        // The flat row of 2^30 at k = 262144 (M = 883544): three items a block of 83 steps.
        assert_eq!(
            filter_chunk(1, 1 << 30, 264, 883_544, FilterChunk::ByRule),
            83 * FILTER_STEP
        );
        // At k = 8192 (M = 257363) one item a block, as with a small buffer.
        assert_eq!(
            filter_chunk(1, 1 << 30, 264, 257_363, FilterChunk::ByRule),
            filter_chunk(1, 1 << 30, 264, 1 << 10, FilterChunk::ByRule)
        );
    }

    #[test]
    fn capacity_sets_filter_items_to_three_quarters_of_a_stage() {
        // The flat row of 2^30: M = 883544 over 264 blocks makes three items a block of 83 steps,
        // none longer than the one item a block of the default.
        assert_eq!(filter_items_for_capacity(883_544, 264), 3);
        let c = (1u64 << 30).div_ceil(264 * 3).next_multiple_of(FILTER_STEP);
        assert_eq!(c, 83 * FILTER_STEP);
        let items = (1u64 << 30).div_ceil(c);
        assert!(items <= 3 * 264);
        assert!(883_544u64.div_ceil(items) <= FILTER_STAGE * 3 / 4);
        // A buffer that fits the stages with one item a block keeps one.
        assert_eq!(filter_items_for_capacity(257_363, 264), 1);
        assert_eq!(filter_items_for_capacity(0, 264), 1);
        // Very large buffers are capped.
        assert_eq!(filter_items_for_capacity(1 << 40, 264), MAX_ITEMS_PER_BLOCK);
        assert_eq!(filter_items_for_capacity(883_544, 0), MAX_ITEMS_PER_BLOCK);
    }

    #[test]
    fn many_filter_items_keep_the_fixed_chunk() {
        for (rows, n) in [
            (1, 1 << 24),
            (1024, 1 << 18),
            (100, 1 << 20),
            (1, 1000),
            (0, 1 << 30),
        ] {
            assert_eq!(
                filter_chunk(rows, n, 264, 1 << 18, FilterChunk::ByRule),
                FILTER_CHUNK,
                "{rows} x {n}"
            );
        }
    }

    #[test]
    fn selection_items_reach_every_sm_within_the_chunk() {
        // A buffer of 2^18 on 132 SMs: 528 items of 512 elements.
        assert_eq!(select_chunk(1, 1 << 18, 132), 512);
        // Short lists keep one block's worth; long ones stop at the chunk.
        assert_eq!(select_chunk(1, 100, 132), SELECT_THREADS as u64);
        assert_eq!(select_chunk(1, 1 << 30, 132), SELECT_CHUNK);
        for (rows, len) in [(1u64, 1u64 << 20), (7, 30_000), (128, 1 << 20)] {
            let c = select_chunk(rows, len, 132);
            let (step, items) = (SELECT_THREADS as u64, SELECT_ITEMS_PER_SM * 132);
            assert!(
                c.is_multiple_of(step) && c <= SELECT_CHUNK,
                "{rows} x {len}: {c}"
            );
            // The smallest multiple of the block that makes at most four items an SM.
            assert!(
                c == SELECT_CHUNK || c * items >= rows * len,
                "{rows} x {len}: {c}"
            );
            assert!(
                c == step || (c - step) * items < rows * len,
                "{rows} x {len}: {c}"
            );
        }
    }

    #[test]
    fn rank_list_slices_fill_the_device_once_up_to_the_cap() {
        assert_eq!(rank_list_slice(1, 8192, 132, false), Some(64));
        assert_eq!(rank_list_slice(1, 20_000, 132, false), Some(192));
        assert_eq!(rank_list_slice(3, 100, 132, false), Some(64));
        assert_eq!(rank_list_slice(1, 67_584, 132, false), Some(512));
        assert_eq!(rank_list_slice(1, 67_585, 132, false), None);
        assert_eq!(rank_list_slice(17, 64, 132, false), None);
        for (rows, k) in [(1u64, 8192u64), (1, 20_000), (4, 5000), (7, 1)] {
            let slice = rank_list_slice(rows, k, 132, false).expect("within the cap");
            assert!(rows * k.div_ceil(slice) <= 132, "{rows} x {k}");
        }
    }

    #[test]
    fn row_parts_cover_the_row_and_fill_the_device() {
        for (n, rows) in [
            (1u64 << 24, 1u64),
            (1 << 20, 16),
            (100_003, 3),
            (5000, 1),
            (1, 1),
        ] {
            let (part, parts) = row_parts(n, rows, 528);
            assert!(
                part.is_multiple_of(64) && part >= MIN_PART,
                "{n} x {rows}: part {part}"
            );
            assert!(
                part * parts >= n && part * (parts - 1) < n,
                "{n} x {rows}: {part} x {parts}"
            );
            if n >= MIN_PART * 528 {
                assert!(
                    rows * parts >= 528 && rows * parts < 528 + 2 * rows,
                    "{n} x {rows}: {parts}"
                );
            }
        }
    }

    #[test]
    fn feistel_domain_covers_n() {
        for n in [
            1u64,
            2,
            3,
            4,
            5,
            1000,
            1 << 20,
            (1 << 20) + 1,
            3 << 30,
            1 << 40,
        ] {
            let h = feistel_half_bits(n);
            assert!(1u128 << (2 * h) >= n as u128, "n = {n}");
            assert!(n <= 2 || (1u128 << (2 * h)) <= 4 * n as u128, "n = {n}");
        }
    }
}
