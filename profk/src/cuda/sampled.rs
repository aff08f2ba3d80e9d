//! Prof-K's own algorithm on the device, step for step the CPU's (`select/cpu/profk.rs`):
//!
//! 1. sample: S positions of each row drawn without replacement (`sample.rs`);
//! 2. threshold: the t-th largest sampled key (`select.rs`, or fused with the draw);
//! 3. filter: one pass keeps each row's elements at or above it in a buffer of M (`filter.rs`);
//! 4. count check: the same pass sets each row's status from k <= R <= M, on the device;
//! 5. redraw: the next attempt's launches take only the rows whose check failed;
//! 6. exact cut: the exact top-k of each buffer (`select.rs`), or of the input itself for the rows
//!    that failed every attempt; few rows in the values-descending order get their sorted outputs
//!    from their buffers in one launch instead (`rank_list.rs`).
//!
//! Unlike the CPU, which loops on a row until it passes, every attempt is queued before any is
//! known to fail: the host never waits. How each step is laid out on the device (one block a row,
//! a spread sample, a cooperative launch) depends on the shape; [`Layout`] names those choices.

use super::abi::{self, AccArgs, RowList, ROW_FALLBACK, ROW_OK, ROW_PENDING};
use super::launch::{Arena, Dev};
use super::output::Outputs;
use super::select::{SelState, Selection, Source};
use super::{filter, rank_list, sample, Input, Records, Selected, Shape};
use crate::{NanPolicy, Order, Plan, Result, TopKOptions};

/// The sampled path's part of the call's zeroed record: the threshold selection's state of every
/// row, the sorted lists' counters, and one row's histogram of kept keys.
pub struct ZeroedState {
    pub selection: SelState,
    pub rank_counts: u64,
    pub filter_bins: u64,
}

impl ZeroedState {
    pub fn bytes(rows: u64) -> usize {
        SelState::bytes(rows as usize) + rank_list::zeroed_bytes(rows) + filter_bins_bytes(rows)
    }

    /// The state at `ptr` in the record, for `rows` rows.
    pub fn at(ptr: u64, rows: u64) -> Self {
        let rank_counts = ptr + SelState::bytes(rows as usize) as u64;
        Self {
            selection: SelState::at(ptr, rows as usize),
            rank_counts,
            filter_bins: rank_counts + rank_list::zeroed_bytes(rows) as u64,
        }
    }
}

/// Bytes of the filter's histogram in the record: one row's, where the rows are one.
fn filter_bins_bytes(rows: u64) -> usize {
    match rows {
        1 => abi::FILTER_BINS_BYTES,
        _ => 0,
    }
}

/// One sampled selection: `k` of every row of `input` with `plan`, reporting into `records`. With
/// `accumulation`, the first attempt samples the accumulation and its pass writes it into the input
/// (the residual); later attempts read the updated input.
pub struct Call<'a> {
    pub input: &'a Input,
    pub shape: &'a Shape,
    pub k: u64,
    pub opts: &'a TopKOptions,
    pub plan: Plan,
    pub records: &'a Records,
    pub state: &'a ZeroedState,
    pub accumulation: Option<&'a AccArgs>,
}

/// How the steps of a call are laid out on the device.
struct Layout {
    /// Composites of at most 64 bits: small samples and buffers are selected inside one block,
    /// and a large selection stops early and finishes with one min pass.
    narrow: bool,
    /// The sample's threshold is selected by one block a row.
    sample_in_one_block: bool,
    /// ... which also draws the sample, in one launch: rows enough to fill the device.
    draw_in_threshold_block: bool,
    /// Fewer rows than SMs: each row's sample spread over many blocks (blocks a row, candidates a
    /// thread), one launch an attempt whether or not it is captured.
    spread: Option<(u64, u64)>,
    /// Each buffer's top-k is selected by one block a row.
    buffer_in_one_block: bool,
    /// Few rows, values descending: the output places a block ranks from each row's list, where
    /// the sorted outputs come straight from the buffers.
    ranked_slice: Option<u64>,
    /// One row's buffer selected by the filter's histogram of its kept keys (the cooperative
    /// launch), and the filter's histogram where it counts (0: none).
    buffer_by_bins: bool,
    ranked_by_bins: bool,
    counted_bins: u64,
    /// Attempts before the dense fallback; each further one costs a few launches even when every
    /// row has passed.
    attempts: u32,
}

impl Layout {
    fn of(arena: &Arena, call: &Call) -> Layout {
        let (shape, opts, plan) = (call.shape, call.opts, call.plan);
        let tuning = &arena.tuning;
        let narrow = shape.key_bits + shape.index_bits <= 64 && !tuning.force_wide;
        let sample_in_one_block = narrow && plan.sample <= sample::FUSED_MAX_SAMPLE;
        // With fewer rows than SMs, a launch over every SM draws the sample first, so that one
        // block does not compute all S sampled positions alone.
        let draw_in_threshold_block = sample_in_one_block && shape.rows >= u64::from(arena.sms);
        let spread_allowed = narrow
            && !draw_in_threshold_block
            && call.accumulation.is_none()
            && !tuning.no_spread_sample;
        let spread = spread_allowed
            .then(|| match tuning.spread_per {
                Some(per) => sample::spread_shape_per(plan.sample, plan.t, per),
                None => sample::spread_shape(plan.sample, plan.t),
            })
            .flatten();
        let composites = narrow && opts.order == Order::Desc;
        let ranked_slice = match composites && !opts.approximate && arena.cooperative {
            true => crate::work_split::rank_list_slice(
                shape.rows,
                call.k,
                arena.sms,
                tuning.no_rank_list,
            ),
            false => None,
        };
        let buffer_in_one_block = narrow && plan.capacity <= sample::FUSED_MAX_SAMPLE;
        // One row's pass may count its kept keys by bin for what follows it.
        let one_row_bins = shape.rows == 1 && call.accumulation.is_none() && !tuning.no_filter_bins;
        let buffer_by_bins = one_row_bins
            && narrow
            && ranked_slice.is_none()
            && !buffer_in_one_block
            && !opts.approximate
            && arena.cooperative
            && !tuning.left_out.buffer_selection;
        // Or its sorted outputs gathered by bin from its whole list.
        let ranked_by_bins = one_row_bins
            && ranked_slice.is_some()
            && rank_list::reads_whole(tuning, shape.rows, call.k, plan.capacity);
        let counted_bins = match buffer_by_bins || ranked_by_bins {
            true => call.state.filter_bins,
            false => 0,
        };
        let attempts = if opts.approximate || tuning.left_out.redraw {
            1
        } else {
            crate::work_split::device_attempts(
                shape.rows,
                shape.n,
                call.input.dtype.size_in_bytes() as u64,
                opts.row_budget(shape.rows as usize),
                tuning.attempts,
            )
        };
        Layout {
            narrow,
            sample_in_one_block,
            draw_in_threshold_block,
            spread,
            buffer_in_one_block,
            ranked_slice,
            buffer_by_bins,
            ranked_by_bins,
            counted_bins,
            attempts,
        }
    }
}

/// Device memory of one call's attempts and exact cut.
struct Memory {
    /// The spread sample's candidates (blocks a row x t a row).
    spread_candidates: Dev<u64>,
    /// The drawn sample, where a launch of its own draws it.
    sample_keys: Dev<u32>,
    sample_indices: Dev<u64>,
    buffer: filter::Buffer,
    /// k slots a row, and for composites of at most 64 bits in the values-descending order, their
    /// composites at the same places (the output then gathers no key).
    slots: Dev<u64>,
    composites: Option<Dev<u64>>,
    /// One row's bin that the buffer's selection by bins puts aside.
    bin_edge: Dev<u64>,
    /// The sorted lists' scatter space.
    bucket: Dev<u64>,
    /// Row lists by status, written by every filter pass: later launches touch only their rows.
    /// An attempt reads the lists of the one before while its pass writes the other pair.
    row_lists: [(Dev<u32>, Dev<u32>); 2],
}

impl Memory {
    fn alloc(arena: &mut Arena, call: &Call, layout: &Layout) -> Result<Memory> {
        let rows = call.shape.rows as usize;
        let (s, cap, k) = (call.plan.sample, call.plan.capacity, call.k as usize);
        let spread_candidates = match layout.spread {
            Some((blocks_per_row, _)) => {
                arena.alloc::<u64>(rows * (blocks_per_row * call.plan.t) as usize)?
            }
            None => arena.alloc::<u64>(0)?,
        };
        let drawn_apart = !layout.draw_in_threshold_block && layout.spread.is_none();
        let sample_len = if drawn_apart { rows * s as usize } else { 0 };
        let sample_keys = arena.alloc::<u32>(sample_len)?;
        let sample_indices = arena.alloc::<u64>(sample_len)?;
        let buffer = filter::Buffer {
            keys: arena.alloc::<u32>(rows * cap as usize)?,
            idx: arena.alloc::<u64>(rows * cap as usize)?,
            cap,
        };
        // A timing variant without the buffer's top-k leaves the slots unwritten: zero them, they
        // are gathered (composite 0 decodes to an index in the row).
        let unwritten = arena.tuning.left_out.buffer_selection;
        let slots = match unwritten {
            true => arena.zeros::<u64>(rows * k)?,
            false => arena.alloc::<u64>(rows * k)?,
        };
        let composites = match (layout.narrow && call.opts.order == Order::Desc, unwritten) {
            (false, _) => None,
            (true, false) => Some(arena.alloc::<u64>(rows * k)?),
            (true, true) => Some(arena.zeros::<u64>(rows * k)?),
        };
        let bin_edge_len = if layout.buffer_by_bins {
            abi::BIN_EDGE_CAP
        } else {
            0
        };
        let bin_edge = arena.alloc::<u64>(bin_edge_len)?;
        let bucket = match layout.ranked_slice {
            Some(_) => {
                let len = rank_list::bucket_len(&arena.tuning, call.shape.rows, call.k, cap);
                arena.alloc::<u64>(len)?
            }
            None => arena.alloc::<u64>(0)?,
        };
        let row_lists = [row_lists(arena, rows)?, row_lists(arena, rows)?];
        Ok(Memory {
            spread_candidates,
            sample_keys,
            sample_indices,
            buffer,
            slots,
            composites,
            bin_edge,
            bucket,
            row_lists,
        })
    }

    /// The lists that `attempt`'s pass writes.
    fn lists_written_by(&self, attempt: u32) -> &(Dev<u32>, Dev<u32>) {
        &self.row_lists[(attempt as usize - 1) % 2]
    }

    /// The rows of `status` after `attempt`'s pass.
    fn rows_after(&self, attempt: u32, status: u32, rows: u64) -> RowList {
        let (ids, counts) = self.lists_written_by(attempt);
        RowList {
            ids: ids.ptr + 4 * u64::from(status) * rows,
            count: counts.ptr + 4 * u64::from(status),
        }
    }
}

fn row_lists(arena: &mut Arena, rows: usize) -> Result<(Dev<u32>, Dev<u32>)> {
    Ok((arena.alloc::<u32>(3 * rows)?, arena.alloc::<u32>(3)?))
}

/// Queues every attempt and the exact cut. Returns k row-local indices per row (any order) with
/// their composites where [`Memory::composites`] holds them, or the sorted outputs themselves.
pub fn select(arena: &mut Arena, call: &Call) -> Result<Selected> {
    let layout = Layout::of(arena, call);
    let memory = Memory::alloc(arena, call, &layout)?;
    let arena: &Arena = arena;
    for attempt in 1..=layout.attempts {
        // Step 5: the first attempt takes every row, a redraw only those whose check failed.
        let rows = match attempt {
            1 => RowList::default(),
            _ => memory.rows_after(attempt - 1, ROW_PENDING, call.shape.rows),
        };
        let accumulation = call.accumulation.filter(|_| attempt == 1);
        sample_and_threshold(arena, call, &layout, &memory, attempt, rows, accumulation)?;
        filter_and_check(arena, call, &layout, &memory, attempt, rows, accumulation)?;
    }
    exact_cut(arena, call, &layout, memory)
}

/// Steps 1 and 2 of `attempt` on `rows`: each row's sample and its t-th largest key, the row's
/// threshold (`RowSel.tmin`).
fn sample_and_threshold(
    arena: &Arena,
    call: &Call,
    layout: &Layout,
    memory: &Memory,
    attempt: u32,
    rows: RowList,
    accumulation: Option<&AccArgs>,
) -> Result<()> {
    let (input, shape, plan, seed) = (call.input, call.shape, call.plan, call.opts.seed);
    let sel = &call.state.selection.sel;
    if let Some(spread) = layout.spread {
        let sample_threshold = (plan.sample, plan.t);
        let candidates = &memory.spread_candidates;
        return sample::spread_select(
            arena,
            input,
            shape,
            sample_threshold,
            spread,
            seed,
            attempt,
            rows,
            sel,
            candidates,
        );
    }
    if layout.draw_in_threshold_block {
        return sample::draw_and_select(
            arena,
            input,
            shape,
            plan.sample,
            plan.t,
            seed,
            attempt,
            rows,
            sel,
            accumulation,
        );
    }
    let selection = Selection {
        arena,
        input,
        shape: *shape,
        state: &call.state.selection,
        rows,
    };
    let sample = Source::List {
        keys: &memory.sample_keys,
        idx: &memory.sample_indices,
        cap: plan.sample,
        run: None,
        bounded: false,
        bins: None,
    };
    let (keys, indices) = (&memory.sample_keys, &memory.sample_indices);
    // A sample past one block is drawn inside its threshold's cooperative launch.
    let drawn = if layout.sample_in_one_block || accumulation.is_some() {
        false
    } else {
        let draw = sample::args(
            input,
            shape,
            plan.sample,
            seed,
            attempt,
            rows,
            keys.ptr,
            indices.ptr,
        );
        selection.draw_and_kth(&draw, &sample, plan.t, layout.narrow)?
    };
    if drawn {
        return Ok(());
    }
    let s = plan.sample;
    sample::draw(
        arena,
        input,
        shape,
        s,
        seed,
        attempt,
        rows,
        keys,
        indices,
        accumulation,
    )?;
    match layout.sample_in_one_block {
        true => selection.block_kth(&sample, plan.t),
        false => selection.kth(&sample, plan.t, layout.narrow),
    }
}

/// Steps 3 and 4 of `attempt` on `rows`: the pass that fills each row's buffer with the elements
/// at or above its threshold, counts R, and sets the row's status from k <= R <= M (the last
/// attempt's failures fall back); it lists the rows by status for the launches after it.
fn filter_and_check(
    arena: &Arena,
    call: &Call,
    layout: &Layout,
    memory: &Memory,
    attempt: u32,
    rows: RowList,
    accumulation: Option<&AccArgs>,
) -> Result<()> {
    let (ids, counts) = memory.lists_written_by(attempt);
    let pass = filter::Pass {
        state_sel: &call.state.selection.sel,
        use_tmin: layout.narrow,
        run: &call.records.run,
        global: &call.records.global,
        count_nan: attempt == 1 && call.opts.nan == NanPolicy::Error,
        last_attempt: attempt == layout.attempts,
        approximate: call.opts.approximate,
        rows,
        lists: Some((ids.ptr, counts.ptr)),
        bins: layout.counted_bins,
    };
    let (input, shape, buffer) = (call.input, call.shape, &memory.buffer);
    match accumulation {
        Some(a) => {
            filter::run_accumulate(arena, a, input, shape, call.k, buffer, &pass)?;
            Selection::classify(arena, &call.records.run, shape.rows, ids, counts)
        }
        None => filter::run(arena, input, shape, call.k, buffer, &pass),
    }
}

/// Step 6: the exact top-k of every passed row's buffer, and of the input of every row that
/// failed each attempt (the dense fallback); or the sorted outputs of few rows straight from
/// their lists.
fn exact_cut(arena: &Arena, call: &Call, layout: &Layout, memory: Memory) -> Result<Selected> {
    let (input, shape, k, cap) = (call.input, call.shape, call.k, call.plan.capacity);
    let run = &call.records.run;
    let last = layout.attempts;
    let passed = Selection {
        arena,
        input,
        shape: *shape,
        state: &call.state.selection,
        rows: memory.rows_after(last, ROW_OK, shape.rows),
    };
    let failed = Selection {
        rows: memory.rows_after(last, ROW_FALLBACK, shape.rows),
        ..passed
    };
    let buffers = Source::List {
        keys: &memory.buffer.keys,
        idx: &memory.buffer.idx,
        cap,
        run: Some(run),
        // The filter kept every element at or above the row's tmin (composites of 64 bits).
        bounded: layout.narrow,
        bins: layout
            .buffer_by_bins
            .then_some((call.state.filter_bins, memory.bin_edge.ptr)),
    };
    let (slots, composites) = (&memory.slots, memory.composites.as_ref());
    let left_out = arena.tuning.left_out;
    let fallback = !left_out.fallback;
    if let (Some(slice), Some(composites)) = (layout.ranked_slice, composites) {
        // The fallback's composites first: its rows' lists. The launch that reads each row's
        // whole list ranks a fallen-back row from its input and needs none.
        if fallback && !rank_list::reads_whole(&arena.tuning, shape.rows, k, cap) {
            failed.exact(&Source::Dense, slots, k, run, Some(composites))?;
        }
        let sorted = Outputs::alloc(arena, input.dtype, shape.rows * k)?;
        if !left_out.output {
            let lists = rank_list::Lists {
                buffer: &memory.buffer,
                run,
                sel: &call.state.selection.sel,
                comps: composites,
            };
            let bins = match layout.ranked_by_bins {
                true => call.state.filter_bins,
                false => 0,
            };
            rank_list::launch(
                arena,
                input,
                shape,
                (k, slice),
                &lists,
                (call.state.rank_counts, bins),
                &memory.bucket,
                sorted.ptrs(arena),
            )?;
        }
        return Ok(Selected::Sorted(sorted));
    }
    // The dense fallback of the rows that failed every attempt shares the buffer's cooperative
    // launch where the buffer takes one.
    let dense = |rows: &Selection| match fallback {
        true => rows.exact(&Source::Dense, slots, k, run, composites),
        false => Ok(()),
    };
    if left_out.buffer_selection {
        dense(&failed)?;
    } else if layout.buffer_in_one_block {
        passed.block_topk(&buffers, slots, k, composites)?;
        dense(&failed)?;
    } else if fallback {
        passed.exact_then_dense(&buffers, &failed, slots, k, run, composites)?;
    } else {
        passed.exact(&buffers, slots, k, run, composites)?;
    }
    Ok(Selected::Slots(memory.slots, memory.composites))
}
