//! The output stage: the k slots of every row sorted into the requested order, with their values
//! and i64 indices gathered (kernels/output.cu's ranking, block sorts and gathers, or CUB's sorts).

use candle_core::cuda::cudarc::driver::{CudaSlice, DevicePtr};
use candle_core::cuda::{CudaDType, CudaDevice, CudaStorage};
use candle_core::{op::BackpropOp, DType, Storage, Tensor};

use super::launch::{self, Arena, Arg, Dev};
use super::{module::Family, sort, Input, Shape};
use crate::{kernel_defines::output as kernel, tuning::Tuning, Order, Result};

/// Whether one row's value order sorts its composites by key alone, then puts each run of equal
/// keys in index order (`tie_runs`): half the radix passes of the whole composite for f32 keys.
/// Half precision keys, with few distinct values among k, keep the whole composite's sort; so does
/// a benchmark that asks for it.
fn sort_by_key_alone(shape: &Shape, k: u64, tuning: &Tuning) -> bool {
    shape.rows == 1 && shape.key_bits == 32 && k <= BY_KEY_MAX && !tuning.value_sort_whole
}

/// Places a tie tile holds and the threads of its block.
const TIE_TILE: u64 = kernel::TIE_TILE;
const TIE_THREADS: u32 = kernel::TIE_THREADS as u32;
/// Largest k sorted by key alone: a run of equal keys as long as k then spans at most 64 tiles, so
/// that each of its elements ranks itself among at most 64 sorted pieces.
const BY_KEY_MAX: u64 = 64 * TIE_TILE;

/// Largest k whose per-row sort runs in one block, fused with the gather.
const BLOCK_SORT_MAX: u64 = 4096;
/// The ranking kernels (kernels/output.cu `rank_gather`), the larger slice first: (outputs a block
/// places, kernel, threads a block).
const RANK_SLICES: [(u64, &str, u32); 2] =
    [(128, "rank_gather", 512), (64, "rank_gather_s64", 1024)];
/// Blocks of 512 threads an SM the ranked output may ask for: calls of more slices than that fill
/// the device with one block per row, or sort.
const RANK_BLOCKS_PER_SM: u64 = 2;

/// The ranking kernel, its blocks and its threads for `rows` rows of k outputs, where ranking suits
/// them (their slices of 128 fit the device at once): the smallest slices that still do in one
/// wave, so that more blocks share the work (slices of 32 were slower: every block still reads the
/// row's k keys). A benchmark may set the slice, or take the slices of 64 by 512 threads.
fn rank_kernel(rows: u64, k: u64, sms: u32, tuning: &Tuning) -> Option<(&'static str, u64, u32)> {
    let blocks = |slice: u64| rows * k.div_ceil(slice);
    // Blocks of 512 threads RANK_BLOCKS_PER_SM an SM, of 1024 half as many: one wave.
    let fits = |slice: u64, threads: u32| {
        blocks(slice) <= RANK_BLOCKS_PER_SM * sms as u64 * 512 / threads as u64
    };
    let (slice, _, threads) = RANK_SLICES[0];
    if !fits(slice, threads) {
        return None;
    }
    let forced = tuning.rank_slice;
    let (slice, name, threads) = RANK_SLICES
        .iter()
        .rev()
        .find(|&&(slice, _, threads)| forced.map_or(fits(slice, threads), |f| f == slice))
        .copied()?;
    if slice == 64 && tuning.rank_threads_512 {
        return Some(("rank_gather_s64_t512", blocks(slice), 512));
    }
    Some((name, blocks(slice), threads))
}

/// Sorts the k slots of every row into the requested order and gathers values and i64 indices: few
/// rows by ranking (one launch), one block per row up to [`BLOCK_SORT_MAX`], else CUB's sorts. The
/// slots come with their composites where the selection wrote them: the one-launch forms then read
/// the descending order's keys instead of gathering them.
#[allow(clippy::too_many_arguments)]
pub fn output(
    arena: &mut Arena,
    dev: &CudaDevice,
    input: &Input,
    shape: &Shape,
    k: u64,
    order: Order,
    (slots, comps): (&Dev<u64>, Option<&Dev<u64>>),
    out_shape: &[usize],
    dtype: DType,
) -> Result<(Tensor, Tensor)> {
    let tuning = arena.tuning;
    let narrow = shape.key_bits + shape.index_bits <= 64 && !tuning.force_wide;
    let desc = order == Order::Desc;
    let rankable = (narrow || !desc) && !tuning.left_out.output;
    let rank = rank_kernel(shape.rows, k, arena.sms, &tuning);
    let ranked = rankable && tuning.output_ranking.unwrap_or(rank.is_some());
    // Few rows: a block per slice of the output places it by ranking. More rows with k up to
    // BLOCK_SORT_MAX: a block a row sorts it, by the smallest block sort that holds k (padding is
    // sorted too). Either is one launch; the sorts also take the key width.
    let in_blocks = if ranked {
        // A forced ranking of more slices than fit at once takes the larger slices.
        let (slice, name, threads) = RANK_SLICES[0];
        let (name, blocks, threads) =
            rank.unwrap_or((name, shape.rows * k.div_ceil(slice), threads));
        Some((name, blocks, threads, None))
    } else if k <= BLOCK_SORT_MAX && rankable {
        let (threads, name) = match k {
            0..=512 => (128, "sort_gather_512"),
            513..=1024 => (256, "sort_gather_1024"),
            1025..=2048 => (256, "sort_gather_2048"),
            _ => (256, "sort_gather_4096"),
        };
        let grid = shape.rows.clamp(1, 16 * arena.sms as u64);
        Some((name, grid, threads, Some(Arg::I32(shape.key_bits as i32))))
    } else {
        None
    };
    if let Some((name, grid, threads, key_bits)) = in_blocks {
        let launch = |vals: u64, idx: u64| {
            let mut args = vec![
                Arg::U64(input.ptr),
                Arg::U64(shape.n),
                Arg::U64(k),
                Arg::U64(shape.rows),
                Arg::I32(input.mag as i32),
                Arg::I32(shape.index_bits as i32),
            ];
            args.extend(key_bits);
            args.extend([
                Arg::I32(desc as i32),
                Arg::U64(slots.ptr),
                Arg::U64(vals),
                Arg::U64(idx),
                Arg::U64(comps.map_or(0, |c| c.ptr)),
            ]);
            arena.launch_args(
                Family::Output,
                &format!("{name}_{}", input.suffix),
                grid,
                threads,
                &args,
            )
        };
        return finish(arena, dev, dtype, shape.rows * k, out_shape, launch);
    }
    let (rows, ku) = (shape.rows as usize, k as usize);
    let total = shape.rows * k;
    let grid = arena.grid_for(total, 256, 16);
    let (sorted, index_bits_or_none) = match order {
        _ if tuning.left_out.output => (*slots, -1),
        Order::Index => (
            sort::sort_keys_u64(arena, *slots, rows, ku, false, shape.index_bits)?,
            -1,
        ),
        Order::Desc if narrow => {
            // The selection wrote each slot's composite where it could; else they are gathered.
            let c = match comps {
                Some(c) => *c,
                None => {
                    let c = arena.alloc::<u64>(total as usize)?;
                    arena.launch_args(
                        Family::Output,
                        &format!("out_composite_{}", input.suffix),
                        grid,
                        256,
                        &[
                            Arg::U64(input.ptr),
                            Arg::U64(shape.n),
                            Arg::U64(k),
                            Arg::I32(input.mag as i32),
                            Arg::I32(shape.index_bits as i32),
                            Arg::U64(slots.ptr),
                            Arg::U64(c.ptr),
                            Arg::U64(total),
                        ],
                    )?;
                    c
                }
            };
            let whole = 0..shape.key_bits + shape.index_bits;
            if !sort_by_key_alone(shape, k, &tuning) {
                (
                    sort::sort_keys_u64_bits(arena, c, rows, ku, true, whole)?,
                    shape.index_bits as i32,
                )
            } else {
                let by_key = shape.index_bits..whole.end;
                let sorted = sort::sort_keys_u64_bits(arena, c, rows, ku, true, by_key)?;
                // The composites the sort read take the sorted tiles of the longest runs.
                let tiles = total.div_ceil(TIE_TILE);
                let tile_long = arena.alloc::<u32>(tiles as usize)?;
                let grid = tiles.clamp(1, 2 * arena.sms as u64);
                let (s, t, f) = (sorted.ptr, c.ptr, tile_long.ptr);
                let index_bits = shape.index_bits as i32;
                let composite_bits = whole.end as i32;
                let runs = [Arg::U64(s), Arg::U64(t), Arg::U64(f), Arg::U64(total)];
                let mut args = runs.to_vec();
                args.extend([Arg::I32(index_bits), Arg::I32(composite_bits)]);
                arena.launch_args(Family::Output, "tie_runs", grid, TIE_THREADS, &args)?;
                // The gather places the long runs' elements as it writes them.
                let name = format!("tie_out_{}", input.suffix);
                let launch = |vals: u64, idx: u64| {
                    let mut args = runs.to_vec();
                    args.extend([Arg::I32(index_bits), Arg::U64(input.ptr), Arg::U64(shape.n)]);
                    args.extend([Arg::U64(vals), Arg::U64(idx)]);
                    arena.launch_args(Family::Output, &name, grid, TIE_THREADS, &args)
                };
                return finish(arena, dev, dtype, total, out_shape, launch);
            }
        }
        Order::Desc => {
            let by_index = sort::sort_keys_u64(arena, *slots, rows, ku, false, shape.index_bits)?;
            let keys = arena.alloc::<u32>(total as usize)?;
            arena.launch_args(
                Family::Output,
                &format!("out_keys_{}", input.suffix),
                grid,
                256,
                &[
                    Arg::U64(input.ptr),
                    Arg::U64(shape.n),
                    Arg::U64(k),
                    Arg::I32(input.mag as i32),
                    Arg::U64(by_index.ptr),
                    Arg::U64(keys.ptr),
                    Arg::U64(total),
                ],
            )?;
            (sort::sort_pairs_desc(arena, keys, by_index, rows, ku)?, -1)
        }
    };
    let launch = |vals: u64, idx: u64| {
        arena.launch_args(
            Family::Output,
            &format!("out_gather_{}", input.suffix),
            grid,
            256,
            &[
                Arg::U64(input.ptr),
                Arg::U64(shape.n),
                Arg::U64(k),
                Arg::I32(index_bits_or_none),
                Arg::U64(sorted.ptr),
                Arg::U64(vals),
                Arg::U64(idx),
                Arg::U64(total),
            ],
        )
    };
    finish(arena, dev, dtype, total, out_shape, launch)
}

/// A call's two outputs on the device, allocated before whichever launch writes them.
pub(crate) struct Outputs {
    values: OutValues,
    indices: CudaSlice<i64>,
}

enum OutValues {
    F32(CudaSlice<f32>),
    F16(CudaSlice<half::f16>),
    Bf16(CudaSlice<half::bf16>),
}

impl Outputs {
    /// Uninitialized outputs of `total` elements: every caller writes them in full.
    pub fn alloc(arena: &Arena, dtype: DType, total: u64) -> Result<Self> {
        let stream = &arena.stream;
        let n = total as usize;
        // SAFETY: every caller's launches write both outputs in full before they are read.
        let indices = unsafe { stream.alloc::<i64>(n) }.map_err(launch::drv)?;
        // SAFETY: as above.
        let values = unsafe {
            match dtype {
                DType::F32 => OutValues::F32(stream.alloc(n).map_err(launch::drv)?),
                DType::F16 => OutValues::F16(stream.alloc(n).map_err(launch::drv)?),
                _ => OutValues::Bf16(stream.alloc(n).map_err(launch::drv)?),
            }
        };
        Ok(Self { values, indices })
    }

    /// Device addresses of the values and the indices.
    pub fn ptrs(&self, arena: &Arena) -> (u64, u64) {
        let stream = &arena.stream;
        let values = match &self.values {
            OutValues::F32(v) => v.device_ptr(stream).0,
            OutValues::F16(v) => v.device_ptr(stream).0,
            OutValues::Bf16(v) => v.device_ptr(stream).0,
        };
        (values, self.indices.device_ptr(stream).0)
    }

    pub fn into_tensors(self, dev: &CudaDevice, shape: &[usize]) -> (Tensor, Tensor) {
        let values = match self.values {
            OutValues::F32(v) => wrap(v, dev, shape),
            OutValues::F16(v) => wrap(v, dev, shape),
            OutValues::Bf16(v) => wrap(v, dev, shape),
        };
        (values, wrap(self.indices, dev, shape))
    }
}

/// Allocates the two outputs, lets `launch(values, indices)` fill them, and wraps them as tensors.
fn finish(
    arena: &Arena,
    dev: &CudaDevice,
    dtype: DType,
    total: u64,
    out_shape: &[usize],
    launch: impl FnOnce(u64, u64) -> Result<()>,
) -> Result<(Tensor, Tensor)> {
    let outputs = Outputs::alloc(arena, dtype, total)?;
    let (values, indices) = outputs.ptrs(arena);
    launch(values, indices)?;
    Ok(outputs.into_tensors(dev, out_shape))
}

fn wrap<T: CudaDType>(slice: CudaSlice<T>, dev: &CudaDevice, shape: &[usize]) -> Tensor {
    let storage = Storage::Cuda(CudaStorage::wrap_cuda_slice(slice, dev.clone()));
    Tensor::from_storage(storage, shape, BackpropOp::none(), false)
}
