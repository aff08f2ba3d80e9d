//! Launch helpers shared by the kernel-family wrappers.
use candle_core::cuda::cudarc::driver::{
    sys::CUdevice_attribute, CudaFunction, CudaSlice, CudaStream, DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg,
    ValidAsZeroBits,
};
use std::sync::Arc;

use super::module::{function, Family};
use crate::{Error, Result};

/// Device allocations of one call, with their total: the call's auxiliary memory.
pub struct Arena {
    pub stream: Arc<CudaStream>,
    pub bytes: usize,
    pub sms: u32,
}

impl Arena {
    pub fn new(stream: Arc<CudaStream>) -> Result<Self> {
        let sms = stream
            .context()
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(drv)? as u32;
        Ok(Self { stream, bytes: 0, sms })
    }

    /// Uninitialized device memory for `len` elements (at least one).
    pub fn alloc<T: DeviceRepr>(&mut self, len: usize) -> Result<CudaSlice<T>> {
        let len = len.max(1);
        self.bytes += len * std::mem::size_of::<T>();
        // SAFETY: every buffer is written by a kernel before it is read.
        unsafe { self.stream.alloc::<T>(len) }.map_err(drv)
    }

    pub fn zeros<T: DeviceRepr + ValidAsZeroBits>(&mut self, len: usize) -> Result<CudaSlice<T>> {
        let len = len.max(1);
        self.bytes += len * std::mem::size_of::<T>();
        self.stream.alloc_zeros::<T>(len).map_err(drv)
    }

    pub fn ptr<T>(&self, s: &CudaSlice<T>) -> u64 {
        s.device_ptr(&self.stream).0
    }

    pub fn func(&self, family: Family, name: &str) -> Result<CudaFunction> {
        function(self.stream.context(), family, name)
    }

    /// Launches `name` with one struct argument.
    pub fn launch_struct<A: DeviceRepr>(&self, family: Family, name: &str, grid: u64, block: u32, args: &A) -> Result<()> {
        let f = self.func(family, name)?;
        let mut b = self.stream.launch_builder(&f);
        b.arg(args);
        // SAFETY: the argument record mirrors the kernel's parameter struct (abi.rs).
        unsafe { b.launch(cfg(grid, block)) }.map_err(drv)?;
        Ok(())
    }

    /// Launches `name` with a list of 8-byte scalar arguments (pointers as u64, sizes, i32 widened
    /// by the caller where the kernel takes `int`).
    pub fn launch_args(&self, family: Family, name: &str, grid: u64, block: u32, args: &[Arg]) -> Result<()> {
        let f = self.func(family, name)?;
        let mut b = self.stream.launch_builder(&f);
        for a in args {
            match a {
                Arg::U64(v) => b.arg(v),
                Arg::I32(v) => b.arg(v),
            };
        }
        // SAFETY: the argument list matches the kernel signature, checked by the callers' tests.
        unsafe { b.launch(cfg(grid, block)) }.map_err(drv)?;
        Ok(())
    }

    /// A grid-stride launch over `total` items: enough blocks to fill the device, never more than needed.
    pub fn grid_for(&self, total: u64, block: u32, per_sm: u32) -> u64 {
        total.div_ceil(block as u64).clamp(1, (self.sms * per_sm) as u64)
    }
}

pub enum Arg {
    U64(u64),
    I32(i32),
}

fn cfg(grid: u64, block: u32) -> LaunchConfig {
    LaunchConfig { grid_dim: (grid.clamp(1, i32::MAX as u64) as u32, 1, 1), block_dim: (block, 1, 1), shared_mem_bytes: 0 }
}

pub fn drv(e: impl std::fmt::Debug) -> Error {
    Error::Param(format!("CUDA driver: {e:?}"))
}
