//! The `dense` exchange on device buffers: NCCL's all-reduce in place on a tensor's memory, on the
//! stream the model computes on, with no copy to the host.
use crate::error::{Error, Result};
use candle_core::cuda::cudarc::driver::{
    sys::CUdeviceptr, CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, SyncOnDrop,
};
use candle_core::cuda::cudarc::nccl::safe::ReduceOp;
use candle_core::{DType, Storage, Tensor};
use std::sync::Arc;

/// A tensor's f32 memory as NCCL's buffer.
struct Raw {
    ptr: CUdeviceptr,
    len: usize,
    stream: Arc<CudaStream>,
}

impl DeviceSlice<f32> for Raw {
    fn len(&self) -> usize {
        self.len
    }
    fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

impl DevicePtrMut<f32> for Raw {
    fn device_ptr_mut<'a>(&'a mut self, _: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>) {
        // The communicator runs on the tensor's own stream: ordered after its writes already.
        (self.ptr, SyncOnDrop::Sync(None))
    }
}

/// The mean of the contiguous f32 CUDA tensor `t` over the ranks, in place (NCCL's `ncclAvg`).
pub fn all_reduce_mean(nccl: &collective::NcclCollective, t: &Tensor) -> Result<()> {
    let fail = |m: String| Error::Distributed(format!("dense all-reduce: {m}"));
    if t.dtype() != DType::F32 || !t.is_contiguous() {
        return Err(fail(format!(
            "needs a contiguous f32 buffer, got {:?}",
            t.dtype()
        )));
    }
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cuda(cs) = &*storage else {
        return Err(fail("needs a CUDA tensor".into()));
    };
    let stream = cs.device.cuda_stream();
    let slice = cs.as_cuda_slice::<f32>()?;
    let base = slice.device_ptr(&stream).0;
    let mut raw = Raw {
        ptr: base + 4 * layout.start_offset() as u64,
        len: t.elem_count(),
        stream: stream.clone(),
    };
    if nccl.stream().cu_stream() != stream.cu_stream() {
        return Err(fail(
            "the communicator runs on another stream than the tensor".into(),
        ));
    }
    nccl.with_comm(|comm| comm.all_reduce_in_place(&mut raw, &ReduceOp::Avg))
        .map_err(|e| fail(format!("{e:?}")))?;
    Ok(())
}
