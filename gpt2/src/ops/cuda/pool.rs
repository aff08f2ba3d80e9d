//! The device's stream-ordered memory pool as a caching allocator: candle allocates every tensor
//! with cuMemAllocAsync and has no cache of its own, and at the pool's default release threshold
//! (0) the driver unmaps freed memory at every synchronisation, so each training step would map
//! its buffers again.
use super::drv;
use candle_core::cuda::cudarc::driver::sys;
use candle_core::{bail, Result};

/// Makes the device's stream-ordered memory pool keep freed memory (candle allocates every tensor with
/// cuMemAllocAsync and has no caching allocator of its own), and resets its high-water mark.
pub fn keep_pool_memory(device: &candle_core::Device) -> Result<()> {
    let pool = default_pool(device)?;
    set_attribute(
        pool,
        sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
        u64::MAX,
    )?;
    reset_pool_peak(device)
}

/// Resets the pool's high-water mark of memory in use.
pub fn reset_pool_peak(device: &candle_core::Device) -> Result<()> {
    let pool = default_pool(device)?;
    // The high-water mark may only be reset to 0.
    set_attribute(
        pool,
        sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH,
        0,
    )
}

/// The most memory in use from the pool since the last reset, in bytes.
pub fn pool_peak_bytes(device: &candle_core::Device) -> Result<u64> {
    let pool = default_pool(device)?;
    let mut v = 0u64;
    // SAFETY: a valid pool and attribute, a u64 value as the attribute requires.
    check(unsafe {
        sys::cuMemPoolGetAttribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH,
            &mut v as *mut u64 as *mut std::ffi::c_void,
        )
    })?;
    Ok(v)
}

/// Sets a pool attribute whose value is a u64.
fn set_attribute(
    pool: sys::CUmemoryPool,
    attribute: sys::CUmemPool_attribute,
    mut value: u64,
) -> Result<()> {
    // SAFETY: a valid pool, and a u64 value as the u64 attributes require.
    check(unsafe {
        sys::cuMemPoolSetAttribute(
            pool,
            attribute,
            &mut value as *mut u64 as *mut std::ffi::c_void,
        )
    })
}

fn default_pool(device: &candle_core::Device) -> Result<sys::CUmemoryPool> {
    let candle_core::Device::Cuda(dev) = device else {
        bail!("memory pool: expected a CUDA device")
    };
    let stream = dev.cuda_stream();
    let ctx = stream.context();
    ctx.bind_to_thread().map_err(|e| drv("memory pool", e))?;
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    // SAFETY: a valid device ordinal of a live context.
    check(unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()) })?;
    Ok(pool)
}

fn check(r: sys::CUresult) -> Result<()> {
    if r != sys::CUresult::CUDA_SUCCESS {
        bail!("memory pool: CUDA driver call failed: {r:?}")
    }
    Ok(())
}
