//! Device memory and launch helpers shared by the kernel-family wrappers.
//!
//! A call's temporary buffers are carved from one workspace per stream that is kept between calls
//! (like a caching allocator): no allocation, event creation or event record per buffer, which would
//! otherwise cost more host time than the kernels of a small call take on the device.
use candle_core::cuda::cudarc::driver::{
    result, sys::CUdevice_attribute, CudaFunction, CudaSlice, CudaStream, DevicePtr, DeviceRepr,
    LaunchConfig, PushKernelArg,
};
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, OnceLock};

use super::module::{function, Family};
use crate::{Error, Result};

/// A typed range of the workspace: a raw device pointer and a length.
#[derive(Debug)]
pub struct Dev<T> {
    pub ptr: u64,
    pub len: usize,
    _t: PhantomData<T>,
}

impl<T> Dev<T> {
    /// A range the caller owns elsewhere.
    pub fn at(ptr: u64, len: usize) -> Self {
        Self {
            ptr,
            len,
            _t: PhantomData,
        }
    }
}

impl<T> Clone for Dev<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Dev<T> {}

struct Workspace {
    slice: CudaSlice<u8>,
    ptr: u64,
}

fn cache() -> &'static Mutex<HashMap<usize, Workspace>> {
    static C: OnceLock<Mutex<HashMap<usize, Workspace>>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The buffers of one call, carved from the stream's workspace; gives it back when dropped.
pub struct Arena {
    pub stream: Arc<CudaStream>,
    pub sms: u32,
    /// Bytes this call carved: its auxiliary device memory.
    pub bytes: usize,
    key: usize,
    chunks: Vec<Workspace>,
    off: usize,
}

const ALIGN: usize = 256;

impl Arena {
    pub fn new(stream: Arc<CudaStream>) -> Result<Self> {
        let sms = stream
            .context()
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(drv)? as u32;
        let key = stream.cu_stream() as usize;
        let chunks = cache()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key)
            .into_iter()
            .collect();
        Ok(Self {
            stream,
            sms,
            bytes: 0,
            key,
            chunks,
            off: 0,
        })
    }

    /// Uninitialized device memory for `len` elements (at least one).
    pub fn alloc<T>(&mut self, len: usize) -> Result<Dev<T>> {
        let bytes = (len.max(1) * std::mem::size_of::<T>()).next_multiple_of(ALIGN);
        self.bytes += bytes;
        let fits = self
            .chunks
            .last()
            .is_some_and(|c| self.off + bytes <= c.slice.len());
        if !fits {
            let total: usize = self.chunks.iter().map(|c| c.slice.len()).sum();
            let size = bytes.max(total).max(1 << 20);
            // SAFETY: workspace memory is written by a kernel or a memset before it is read.
            let slice = unsafe { self.stream.alloc::<u8>(size) }.map_err(drv)?;
            let ptr = slice.device_ptr(&self.stream).0;
            self.chunks.push(Workspace { slice, ptr });
            self.off = 0;
        }
        let c = self.chunks.last().expect("a chunk fits");
        let ptr = c.ptr + self.off as u64;
        self.off += bytes;
        Ok(Dev {
            ptr,
            len: len.max(1),
            _t: PhantomData,
        })
    }

    /// Zeroed device memory.
    pub fn zeros<T>(&mut self, len: usize) -> Result<Dev<T>> {
        let d = self.alloc::<T>(len)?;
        // SAFETY: the range lies inside a live workspace chunk; the memset is ordered on the stream.
        unsafe {
            result::memset_d8_async(
                d.ptr,
                0,
                d.len * std::mem::size_of::<T>(),
                self.stream.cu_stream(),
            )
        }
        .map_err(drv)?;
        Ok(d)
    }

    pub fn func(&self, family: Family, name: &str) -> Result<CudaFunction> {
        function(self.stream.context(), family, name)
    }

    /// Launches `name` with one struct argument.
    pub fn launch_struct<A: DeviceRepr>(
        &self,
        family: Family,
        name: &str,
        grid: u64,
        block: u32,
        args: &A,
    ) -> Result<()> {
        let f = self.func(family, name)?;
        let mut b = self.stream.launch_builder(&f);
        b.arg(args);
        // SAFETY: the argument record mirrors the kernel's parameter struct (abi.rs).
        unsafe { b.launch(cfg(grid, block)) }.map_err(drv)?;
        Ok(())
    }

    /// Launches `name` with scalar arguments (pointers as u64, `int` parameters as i32).
    pub fn launch_args(
        &self,
        family: Family,
        name: &str,
        grid: u64,
        block: u32,
        args: &[Arg],
    ) -> Result<()> {
        let f = self.func(family, name)?;
        let mut b = self.stream.launch_builder(&f);
        for a in args {
            match a {
                Arg::U64(v) => b.arg(v),
                Arg::I32(v) => b.arg(v),
                Arg::U32(v) => b.arg(v),
            };
        }
        // SAFETY: each caller passes the kernel's parameters in order and width.
        unsafe { b.launch(cfg(grid, block)) }.map_err(drv)?;
        Ok(())
    }

    /// A grid-stride launch over `total` items: enough blocks to fill the device, never more than needed.
    pub fn grid_for(&self, total: u64, block: u32, per_sm: u32) -> u64 {
        total
            .div_ceil(block as u64)
            .clamp(1, (self.sms * per_sm) as u64)
    }
}

impl Drop for Arena {
    /// Keeps one workspace of the whole size for the next call on this stream.
    fn drop(&mut self) {
        let total: usize = self.chunks.iter().map(|c| c.slice.len()).sum();
        let keep = if self.chunks.len() == 1 {
            self.chunks.pop()
        } else {
            self.chunks.clear();
            // SAFETY: as in alloc.
            unsafe { self.stream.alloc::<u8>(total) }.ok().map(|slice| {
                let ptr = slice.device_ptr(&self.stream).0;
                Workspace { slice, ptr }
            })
        };
        if let Some(w) = keep {
            cache()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(self.key, w);
        }
    }
}

#[derive(Clone, Copy)]
pub enum Arg {
    U64(u64),
    I32(i32),
    U32(u32),
}

fn cfg(grid: u64, block: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (grid.clamp(1, i32::MAX as u64) as u32, 1, 1),
        block_dim: (block, 1, 1),
        shared_mem_bytes: 0,
    }
}

pub fn drv(e: impl std::fmt::Debug) -> Error {
    Error::Param(format!("CUDA driver: {e:?}"))
}
