//! The device record a call writes its per-row outcomes to, outliving the call's workspace until its
//! status is read or dropped. Records are kept per stream for the next call: a call then zeroes one
//! with a memset instead of allocating it (and its two tracking events).
use candle_core::cuda::cudarc::driver::{result, CudaSlice, CudaStream, DevicePtr};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use super::launch::drv;
use crate::Result;

/// Records kept for reuse per stream, at most this many.
const KEPT: usize = 8;

fn kept() -> &'static Mutex<HashMap<usize, Vec<CudaSlice<u8>>>> {
    static K: OnceLock<Mutex<HashMap<usize, Vec<CudaSlice<u8>>>>> = OnceLock::new();
    K.get_or_init(Default::default)
}

/// `bytes` of zeroed device memory on a stream, handed back for reuse when dropped.
pub struct Record {
    slice: Option<CudaSlice<u8>>,
    pub ptr: u64,
    key: usize,
}

impl Record {
    /// A record of at least `bytes`, its first `bytes` zeroed in `stream`'s order: reused work of
    /// an earlier call on that stream is ordered before it.
    pub fn zeroed(stream: &Arc<CudaStream>, bytes: usize) -> Result<Self> {
        let key = stream.cu_stream() as usize;
        let reused = {
            let mut kept = kept().lock().unwrap_or_else(|e| e.into_inner());
            let list = kept.entry(key).or_default();
            list.iter()
                .position(|s| s.len() >= bytes)
                .map(|i| list.swap_remove(i))
        };
        let slice = match reused {
            Some(s) => s,
            // SAFETY: the memset below writes every byte a call reads.
            None => unsafe { stream.alloc::<u8>(bytes.max(1)) }.map_err(drv)?,
        };
        let ptr = slice.device_ptr(stream).0;
        // SAFETY: `ptr` holds at least `bytes` bytes; the memset is ordered on the stream.
        unsafe { result::memset_d8_async(ptr, 0, bytes, stream.cu_stream()) }.map_err(drv)?;
        Ok(Self {
            slice: Some(slice),
            ptr,
            key,
        })
    }

    pub fn slice(&self) -> &CudaSlice<u8> {
        self.slice
            .as_ref()
            .expect("a record holds its memory until dropped")
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        let Some(slice) = self.slice.take() else {
            return;
        };
        let mut kept = kept().lock().unwrap_or_else(|e| e.into_inner());
        let list = kept.entry(self.key).or_default();
        if list.len() < KEPT {
            list.push(slice);
        }
    }
}
