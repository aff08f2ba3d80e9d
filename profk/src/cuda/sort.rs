//! CUB's radix sorts (kernels/cub_sort.cu, linked as a static library), on candle's stream.
use std::ffi::c_void;

use super::launch::{Arena, Dev};
use crate::{tuning::Tuning, Error, Result};

extern "C" {
    fn profk_sort_keys_u64(
        temp: *mut c_void,
        temp_bytes: *mut usize,
        keys_in: *const u64,
        keys_out: *mut u64,
        rows: i64,
        len: i64,
        descending: i32,
        begin_bit: i32,
        end_bit: i32,
        tile: i32,
        stream: *mut c_void,
    ) -> i32;
    fn profk_sort_pairs_desc_u32_u64(
        temp: *mut c_void,
        temp_bytes: *mut usize,
        keys_in: *const u32,
        keys_out: *mut u32,
        vals_in: *const u64,
        vals_out: *mut u64,
        rows: i64,
        len: i64,
        begin_bit: i32,
        tile: i32,
        stream: *mut c_void,
    ) -> i32;
}

/// Most keys a sort cuts into small tiles: about eight rounds of 2 048-key tiles on the H200's 132
/// SMs.
const SMALL_TILES_MAX: usize = 1 << 21;

/// The onesweep tile, in keys, of a one-row sort of `items` keys: 0 for CUB's sm_90 tuning (5 760
/// 64-bit keys), or 2 048 or 1 024 up to [`SMALL_TILES_MAX`] keys, which a benchmark asks for
/// (`tuning.sort_tile`). Smaller tiles put the flat row's 262 144 keys on 128 or 256 SMs
/// a pass instead of 46, but each pass still took about 11 µs (13 with 1 024) on the H200: a pass
/// over so few keys waits on latency, not on the SMs it reaches.
fn tile_for(tuning: &Tuning, items: usize) -> i32 {
    match tuning.sort_tile {
        Some(tile @ (1024 | 2048)) if items <= SMALL_TILES_MAX => tile,
        _ => 0,
    }
}

fn check(code: i32, what: &str) -> Result<()> {
    if code == 0 {
        Ok(())
    } else {
        Err(Error::Param(format!(
            "CUB {what} failed with cudaError {code}"
        )))
    }
}

/// Runs a CUB call twice, as CUB asks: with null temporary storage, which writes the bytes it
/// needs, then with that much.
fn with_temp_storage(
    arena: &mut Arena,
    what: &str,
    call: impl Fn(*mut c_void, &mut usize) -> i32,
) -> Result<()> {
    let mut bytes = 0usize;
    check(
        call(std::ptr::null_mut(), &mut bytes),
        &format!("{what} size query"),
    )?;
    let temp = arena.alloc::<u8>(bytes)?;
    check(call(temp.ptr as *mut c_void, &mut bytes), what)
}

/// Sorts `rows` rows of `len` u64 keys on bits [0, end_bit) into a new buffer.
pub fn sort_keys_u64(
    arena: &mut Arena,
    keys: Dev<u64>,
    rows: usize,
    len: usize,
    descending: bool,
    end_bit: u32,
) -> Result<Dev<u64>> {
    sort_keys_u64_bits(arena, keys, rows, len, descending, 0..end_bit)
}

/// Sorts `rows` rows of `len` u64 keys into a new buffer: one row stably on `bits` alone, several
/// rows on bits [0, bits.end).
pub fn sort_keys_u64_bits(
    arena: &mut Arena,
    keys: Dev<u64>,
    rows: usize,
    len: usize,
    descending: bool,
    bits: std::ops::Range<u32>,
) -> Result<Dev<u64>> {
    let out = arena.alloc::<u64>(rows * len)?;
    let s = arena.stream.cu_stream() as *mut c_void;
    let (r, l, d) = (rows as i64, len as i64, descending as i32);
    let e = bits.end.max(bits.start + 1) as i32;
    let b = if rows == 1 { bits.start as i32 } else { 0 };
    let (inp, outp) = (keys.ptr as *const u64, out.ptr as *mut u64);
    let tile = tile_for(&arena.tuning, rows * len);
    // SAFETY: the pointers are live workspace ranges; the temporary storage is null (the size
    // query) or of the queried size, on the same stream.
    with_temp_storage(arena, "sort", |temp, bytes| unsafe {
        profk_sort_keys_u64(temp, bytes, inp, outp, r, l, d, b, e, tile, s)
    })?;
    Ok(out)
}

/// Stable sort of u32 keys descending carrying u64 values; returns the sorted values.
pub fn sort_pairs_desc(
    arena: &mut Arena,
    keys: Dev<u32>,
    vals: Dev<u64>,
    rows: usize,
    len: usize,
) -> Result<Dev<u64>> {
    let kout = arena.alloc::<u32>(rows * len)?;
    let vout = arena.alloc::<u64>(rows * len)?;
    let s = arena.stream.cu_stream() as *mut c_void;
    let (r, l) = (rows as i64, len as i64);
    let (kin, vin) = (keys.ptr as *const u32, vals.ptr as *const u64);
    let (ko, vo) = (kout.ptr as *mut u32, vout.ptr as *mut u64);
    let tile = tile_for(&arena.tuning, rows * len);
    // SAFETY: as in sort_keys_u64.
    with_temp_storage(arena, "pair sort", |temp, bytes| unsafe {
        profk_sort_pairs_desc_u32_u64(temp, bytes, kin, ko, vin, vo, r, l, 0, tile, s)
    })?;
    Ok(vout)
}
