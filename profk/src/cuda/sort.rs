//! CUB's radix sorts (kernels/cub_sort.cu, linked as a static library), on candle's stream.
use candle_core::cuda::cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use std::ffi::c_void;
use std::sync::Arc;

use super::Arena;
use crate::{Error, Result};

extern "C" {
    fn profk_sort_keys_u64(
        temp: *mut c_void,
        temp_bytes: *mut usize,
        keys_in: *const u64,
        keys_out: *mut u64,
        rows: i64,
        len: i64,
        descending: i32,
        end_bit: i32,
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
        stream: *mut c_void,
    ) -> i32;
}

fn check(code: i32, what: &str) -> Result<()> {
    if code == 0 {
        Ok(())
    } else {
        Err(Error::Param(format!("CUB {what} failed with cudaError {code}")))
    }
}

fn ptr<T>(s: &CudaSlice<T>, stream: &Arc<CudaStream>) -> u64 {
    s.device_ptr(stream).0
}

fn ptr_mut<T>(s: &mut CudaSlice<T>, stream: &Arc<CudaStream>) -> u64 {
    s.device_ptr_mut(stream).0
}

/// Sorts `rows` rows of `len` u64 keys on bits [0, end_bit) into a new buffer.
pub fn sort_keys_u64(
    arena: &mut Arena,
    keys: &CudaSlice<u64>,
    rows: usize,
    len: usize,
    descending: bool,
    end_bit: u32,
) -> Result<CudaSlice<u64>> {
    let stream = arena.stream.clone();
    let mut out = arena.alloc::<u64>(rows * len)?;
    let (inp, outp) = (ptr(keys, &stream), ptr_mut(&mut out, &stream));
    let s = stream.cu_stream() as *mut c_void;
    let (r, l, d, e) = (rows as i64, len as i64, descending as i32, end_bit.max(1) as i32);
    let mut bytes = 0usize;
    // SAFETY: size query only (null temporary storage); pointers are live device allocations.
    check(
        unsafe { profk_sort_keys_u64(std::ptr::null_mut(), &mut bytes, inp as _, outp as _, r, l, d, e, s) },
        "sort size query",
    )?;
    let mut temp = arena.alloc::<u8>(bytes.max(1))?;
    let tp = ptr_mut(&mut temp, &stream);
    // SAFETY: temporary storage of the queried size, on the same stream.
    check(
        unsafe { profk_sort_keys_u64(tp as _, &mut bytes, inp as _, outp as _, r, l, d, e, s) },
        "sort",
    )?;
    Ok(out)
}

/// Stable sort of u32 keys descending carrying u64 values; returns the sorted values.
pub fn sort_pairs_desc(
    arena: &mut Arena,
    keys: &CudaSlice<u32>,
    vals: &CudaSlice<u64>,
    rows: usize,
    len: usize,
) -> Result<CudaSlice<u64>> {
    let stream = arena.stream.clone();
    let mut kout = arena.alloc::<u32>(rows * len)?;
    let mut vout = arena.alloc::<u64>(rows * len)?;
    let (kin, vin) = (ptr(keys, &stream), ptr(vals, &stream));
    let (ko, vo) = (ptr_mut(&mut kout, &stream), ptr_mut(&mut vout, &stream));
    let s = stream.cu_stream() as *mut c_void;
    let (r, l) = (rows as i64, len as i64);
    let mut bytes = 0usize;
    // SAFETY: as in sort_keys_u64.
    check(
        unsafe {
            profk_sort_pairs_desc_u32_u64(std::ptr::null_mut(), &mut bytes, kin as _, ko as _, vin as _, vo as _, r, l, 0, s)
        },
        "pair sort size query",
    )?;
    let mut temp = arena.alloc::<u8>(bytes.max(1))?;
    let tp = ptr_mut(&mut temp, &stream);
    // SAFETY: as in sort_keys_u64.
    check(
        unsafe { profk_sort_pairs_desc_u32_u64(tp as _, &mut bytes, kin as _, ko as _, vin as _, vo as _, r, l, 0, s) },
        "pair sort",
    )?;
    Ok(vout)
}
