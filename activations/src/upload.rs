//! Host rows onto the training device. On CUDA the rows go through one page-locked buffer and a copy
//! stream of their own, so a producer thread uploads the next chunk at PCIe speed while the training
//! step runs; candle's own `to_device` copies from pageable memory on the compute stream, which both
//! stalls the step and runs through the driver's staging buffers.
use crate::error::Result;
use candle_core::{DType, Device, Tensor};

/// Makes device tensors from little-endian host bytes.
pub struct Uploader {
    device: Device,
    #[cfg(feature = "cuda")]
    cuda: Option<cuda::PinnedUpload>,
}

impl Uploader {
    pub fn new(device: &Device) -> Result<Self> {
        Ok(Self {
            device: device.clone(),
            #[cfg(feature = "cuda")]
            cuda: match device {
                Device::Cuda(dev) => Some(cuda::PinnedUpload::new(dev)?),
                _ => None,
            },
        })
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// A tensor of `dtype` and `shape` on the device, from the bytes `fill` writes into a host buffer
    /// of exactly the tensor's size.
    pub fn upload(
        &mut self,
        dtype: DType,
        shape: &[usize],
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<Tensor> {
        let bytes = shape.iter().product::<usize>() * dtype.size_in_bytes();
        #[cfg(feature = "cuda")]
        if let Some(cuda) = &mut self.cuda {
            return cuda.upload(dtype, shape, bytes, fill);
        }
        let mut host = vec![0u8; bytes];
        fill(&mut host);
        Ok(Tensor::from_raw_buffer(&host, dtype, shape, &self.device)?)
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use crate::error::{Error, Result};
    use candle_core::cuda::cudarc::driver::{
        CudaStream, DeviceRepr, DriverError, PinnedHostSlice, ValidAsZeroBits,
    };
    use candle_core::cuda::CudaDType;
    use candle_core::op::BackpropOp;
    use candle_core::{CudaDevice, CudaStorage, DType, Storage, Tensor};
    use std::sync::Arc;

    fn drv(what: &str, e: DriverError) -> Error {
        Error::Candle(candle_core::Error::Msg(format!("{what}: {e:?}")))
    }

    /// A copy stream and a page-locked staging buffer, reused chunk after chunk.
    pub struct PinnedUpload {
        dev: CudaDevice,
        stream: Arc<CudaStream>,
        staging: Option<PinnedHostSlice<u8>>,
    }

    // SAFETY: the staging buffer is plain host memory owned by this value; every driver call that
    // touches it goes through cudarc, which binds the context to the calling thread first.
    unsafe impl Send for PinnedUpload {}

    impl PinnedUpload {
        pub fn new(dev: &CudaDevice) -> Result<Self> {
            let stream = dev
                .cuda_stream()
                .context()
                .new_stream()
                .map_err(|e| drv("upload stream", e))?;
            Ok(Self {
                dev: dev.clone(),
                stream,
                staging: None,
            })
        }

        pub fn upload(
            &mut self,
            dtype: DType,
            shape: &[usize],
            bytes: usize,
            fill: impl FnOnce(&mut [u8]),
        ) -> Result<Tensor> {
            if self.staging.as_ref().is_none_or(|s| s.len() < bytes) {
                // Free the smaller buffer before taking a larger one.
                self.staging = None;
                // SAFETY: page-locked host memory; every byte used is written by `fill` first.
                let fresh = unsafe { self.stream.context().alloc_pinned::<u8>(bytes.max(1)) }
                    .map_err(|e| drv("page-locked upload buffer", e))?;
                self.staging = Some(fresh);
            }
            let Some(staging) = self.staging.as_mut() else {
                unreachable!("the staging buffer was just allocated")
            };
            let host = staging
                .as_mut_slice()
                .map_err(|e| drv("upload buffer", e))?;
            let host = &mut host[..bytes];
            fill(host);
            let host: &[u8] = host;
            let (stream, dev) = (&self.stream, &self.dev);
            let storage = match dtype {
                DType::F32 => copy::<f32>(stream, dev, host)?,
                DType::BF16 => copy::<half::bf16>(stream, dev, host)?,
                DType::F16 => copy::<half::f16>(stream, dev, host)?,
                DType::F64 => copy::<f64>(stream, dev, host)?,
                DType::U32 => copy::<u32>(stream, dev, host)?,
                other => {
                    return Err(Error::config(
                        "data.dtype",
                        format!("no upload path for {other:?}"),
                    ))
                }
            };
            Ok(Tensor::from_storage(
                Storage::Cuda(storage),
                shape,
                BackpropOp::none(),
                false,
            ))
        }
    }

    /// Copies `host` into a fresh device buffer on the upload stream and waits for it there; the
    /// compute stream is never blocked.
    fn copy<T>(stream: &Arc<CudaStream>, dev: &CudaDevice, host: &[u8]) -> Result<CudaStorage>
    where
        T: CudaDType + DeviceRepr + ValidAsZeroBits + bytemuck::Pod,
    {
        let src: &[T] = bytemuck::try_cast_slice(host)
            .map_err(|e| Error::Candle(candle_core::Error::Msg(format!("upload buffer: {e}"))))?;
        // SAFETY: every element is written by the copy below before anything reads it.
        let mut dst =
            unsafe { stream.alloc::<T>(src.len()) }.map_err(|e| drv("upload allocation", e))?;
        // A host slice (rather than the pinned handle) makes cudarc wait for the copy on this stream
        // when the call returns, so the staging buffer can be refilled at once.
        stream
            .memcpy_htod(src, &mut dst)
            .map_err(|e| drv("host-to-device copy", e))?;
        Ok(CudaStorage::wrap_cuda_slice(dst, dev.clone()))
    }
}
