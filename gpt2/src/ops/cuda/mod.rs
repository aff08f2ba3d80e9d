//! The CUDA side of the fused ops: kernel launches, cuBLASLt calls, pinned host copies and the
//! memory pool's setup.
pub mod attention;
pub mod attention_train;
pub mod cross_entropy;
pub mod host_copy;
pub mod layer_norm;
pub mod linear;
pub mod linear_train;
pub mod pool;

use candle_core::backend::BackendStorage;
use candle_core::cuda::cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig,
};
use candle_core::{CudaStorage, DType, Layout, Result};
use runtime::cuda::Fatbin;
use std::sync::Arc;

pub(super) fn drv(what: &str, e: impl std::fmt::Debug) -> candle_core::Error {
    candle_core::Error::Msg(format!("{what}: CUDA: {e:?}"))
}

/// Device address of a contiguous storage's first element (after the layout's offset).
pub(super) fn address(
    storage: &CudaStorage,
    layout: &Layout,
    stream: &Arc<CudaStream>,
) -> Result<u64> {
    let (start, _) = layout
        .contiguous_offsets()
        .ok_or_else(|| candle_core::Error::Msg("expected a contiguous CUDA tensor".into()))?;
    let (base, elem) = match storage.dtype() {
        DType::F32 => (storage.as_cuda_slice::<f32>()?.device_ptr(stream).0, 4),
        DType::BF16 => (
            storage.as_cuda_slice::<half::bf16>()?.device_ptr(stream).0,
            2,
        ),
        DType::F16 => (
            storage.as_cuda_slice::<half::f16>()?.device_ptr(stream).0,
            2,
        ),
        other => return Err(candle_core::Error::UnsupportedDTypeForOp(other, "fused op")),
    };
    Ok(base + (start * elem) as u64)
}

/// Device address of a contiguous CUDA tensor (kept alive by the caller's tensor).
pub(super) fn tensor_address(t: &candle_core::Tensor) -> Result<u64> {
    let (storage, layout) = t.storage_and_layout();
    let cs = cuda_storage(&storage, "fused op: expected a CUDA tensor")?;
    address(cs, layout, &cs.device.cuda_stream())
}

/// The CUDA storage inside `storage`; `message` is the error otherwise.
pub(super) fn cuda_storage<'a>(
    storage: &'a candle_core::Storage,
    message: &str,
) -> Result<&'a CudaStorage> {
    match storage {
        candle_core::Storage::Cuda(cs) => Ok(cs),
        _ => Err(candle_core::Error::Msg(message.into())),
    }
}

/// The kernel-name suffix of a float dtype the kernels are built for.
pub(super) fn dtype_suffix(dtype: DType, op: &'static str) -> Result<&'static str> {
    match dtype {
        DType::F32 => Ok("f32"),
        DType::BF16 => Ok("bf16"),
        DType::F16 => Ok("f16"),
        other => Err(candle_core::Error::UnsupportedDTypeForOp(other, op)),
    }
}

/// An uninitialised device buffer of `len` elements of `dtype` as candle storage, and its address.
pub(super) fn alloc(
    storage_like: &CudaStorage,
    dtype: DType,
    len: usize,
) -> Result<(CudaStorage, u64)> {
    let dev = storage_like.device.clone();
    let stream = dev.cuda_stream();
    fn wrap<T: candle_core::cuda::CudaDType + candle_core::cuda::cudarc::driver::DeviceRepr>(
        dev: &candle_core::CudaDevice,
        stream: &Arc<CudaStream>,
        len: usize,
    ) -> Result<(CudaStorage, u64)> {
        // SAFETY: every caller writes all `len` elements before anything reads them.
        let slice: CudaSlice<T> = unsafe { dev.alloc::<T>(len)? };
        let ptr = slice.device_ptr(stream).0;
        Ok((CudaStorage::wrap_cuda_slice(slice, dev.clone()), ptr))
    }
    match dtype {
        DType::F32 => wrap::<f32>(&dev, &stream, len),
        DType::BF16 => wrap::<half::bf16>(&dev, &stream, len),
        DType::F16 => wrap::<half::f16>(&dev, &stream, len),
        other => Err(candle_core::Error::UnsupportedDTypeForOp(other, "fused op")),
    }
}

/// A launch of `count` one-dimensional blocks of `threads` threads, without dynamic shared memory.
pub(super) fn blocks(count: usize, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (count as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Kernel `name` of `fatbin` in the context of `storage`'s device.
pub(super) fn function(storage: &CudaStorage, fatbin: &Fatbin, name: &str) -> Result<CudaFunction> {
    Ok(fatbin.function(storage.device.cuda_stream().context(), name)?)
}
