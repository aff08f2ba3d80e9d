//! Device tensors copied to the host on a stream of their own. candle's `to_device(&Device::Cpu)` queues
//! the copy on the compute stream, so a thread writing a checkpoint would hold the training step up for
//! the whole transfer; from a side stream the copy overlaps the step. The source's pending writes are
//! waited for through cudarc's event tracking (on by default), so a tensor just copied on the compute
//! stream may be read at once.
use candle_core::cuda::cudarc::driver::{CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits};
use candle_core::{DType, Device, Storage, Tensor};
use std::sync::Arc;

/// A copy stream of one CUDA device.
pub struct SideStream {
    stream: Arc<CudaStream>,
}

fn driver(what: &str, e: impl std::fmt::Debug) -> candle_core::Error {
    candle_core::Error::Msg(format!("{what}: {e:?}"))
}

impl SideStream {
    pub fn new(dev: &candle_core::CudaDevice) -> candle_core::Result<Self> {
        let stream = dev
            .cuda_stream()
            .context()
            .new_stream()
            .map_err(|e| driver("copy stream", e))?;
        Ok(Self { stream })
    }

    /// A host copy of `t` (f32, f64, u32, i64 or u8); a CPU tensor is copied as it is.
    pub fn to_host(&self, t: &Tensor) -> candle_core::Result<Tensor> {
        if !matches!(t.device(), Device::Cuda(_)) {
            return t.copy();
        }
        let t = t.contiguous()?;
        let (storage, layout) = t.storage_and_layout();
        let Storage::Cuda(s) = &*storage else {
            return Err(driver("device-to-host copy", "not a CUDA tensor"));
        };
        let (start, end) = layout
            .contiguous_offsets()
            .ok_or_else(|| driver("device-to-host copy", "not contiguous"))?;
        let shape = t.shape().clone();
        match t.dtype() {
            DType::F32 => self.copy::<f32>(s.as_cuda_slice()?, start, end, shape),
            DType::F64 => self.copy::<f64>(s.as_cuda_slice()?, start, end, shape),
            DType::U32 => self.copy::<u32>(s.as_cuda_slice()?, start, end, shape),
            DType::I64 => self.copy::<i64>(s.as_cuda_slice()?, start, end, shape),
            DType::U8 => self.copy::<u8>(s.as_cuda_slice()?, start, end, shape),
            other => Err(driver("device-to-host copy", other)),
        }
    }

    /// Copies in chunks through a page-locked staging buffer: at PCIe speed, and a chunk at a time, so
    /// that the copy engine never holds a queue of gigabytes ahead of the training step's own small
    /// device-to-host copies (one pageable copy of a whole checkpoint held steps up for seconds).
    fn copy<T: DeviceRepr + ValidAsZeroBits + candle_core::WithDType>(
        &self,
        slice: &CudaSlice<T>,
        start: usize,
        end: usize,
        shape: candle_core::Shape,
    ) -> candle_core::Result<Tensor> {
        let len = end - start;
        let chunk = (CHUNK_BYTES / std::mem::size_of::<T>()).clamp(1, len.max(1));
        // Cached (not write-combined) host memory: the CPU reads it back.
        // SAFETY: every element read back was written by the copy before it.
        let mut staging = unsafe { self.stream.context().alloc_pinned_with_flags::<T>(chunk, 0) }
            .map_err(|e| driver("page-locked staging buffer", e))?;
        let mut host = Vec::with_capacity(len);
        let mut at = start;
        while at < end {
            let n = chunk.min(end - at);
            self.stream
                .memcpy_dtoh(&slice.slice(at..at + n), &mut staging)
                .map_err(|e| driver("device-to-host copy", e))?;
            let staged = staging
                .as_slice()
                .map_err(|e| driver("device-to-host copy", e))?;
            host.extend_from_slice(&staged[..n]);
            at += n;
        }
        Tensor::from_vec(host, shape, &Device::Cpu)
    }
}

/// Bytes per device-to-host transfer.
const CHUNK_BYTES: usize = 16 << 20;
