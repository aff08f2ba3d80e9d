//! The device record a call writes its per-row outcomes to, outliving the call's workspace until
//! its status is read or dropped. Records are kept per stream for the next call. A record is zeroed
//! when its call lets go of it (a memset queued after that call's kernels), so that the next call
//! on the stream queues no memset before its first kernel; inside a stream capture the call zeroes
//! its own, so that every replay of the graph starts from zeros.
use candle_core::cuda::cudarc::driver::{
    result, sys::CUstreamCaptureStatus, CudaSlice, CudaStream, DevicePtr,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use super::launch::{drv, StreamKey};
use crate::Result;

/// Records kept for reuse per stream, at most this many.
const KEPT: usize = 8;

/// A record between calls: `zeroed` when every byte is zero in stream order.
struct Kept {
    slice: CudaSlice<u8>,
    zeroed: bool,
}

fn kept() -> &'static Mutex<HashMap<StreamKey, Vec<Kept>>> {
    static K: OnceLock<Mutex<HashMap<StreamKey, Vec<Kept>>>> = OnceLock::new();
    K.get_or_init(Default::default)
}

/// `bytes` of zeroed device memory on a stream, handed back for reuse when dropped.
pub struct Record {
    slice: Option<CudaSlice<u8>>,
    pub ptr: u64,
    key: StreamKey,
    /// The bytes the call may write: what a drop zeroes again.
    used: usize,
}

impl Record {
    /// A record of at least `bytes`, its first `bytes` zero in `stream`'s order: reused work of an
    /// earlier call on that stream is ordered before it. `capturing`: the stream is being captured.
    pub fn zeroed(stream: &Arc<CudaStream>, bytes: usize, capturing: bool) -> Result<Self> {
        let key = StreamKey::of(stream);
        let reused = {
            let mut kept = kept().lock().unwrap_or_else(|e| e.into_inner());
            let list = kept.entry(key).or_default();
            let fits = |k: &Kept| k.slice.len() >= bytes;
            list.iter()
                .position(|k| k.zeroed && fits(k))
                .or_else(|| list.iter().position(fits))
                .map(|i| list.swap_remove(i))
        };
        let (slice, zero_bytes) = match reused {
            Some(k) if k.zeroed && !capturing => (k.slice, 0),
            // Zeroed whole: the bytes past this call's stay zero for a later, larger one.
            Some(k) => {
                let len = k.slice.len();
                (k.slice, len)
            }
            // SAFETY: the memset below writes every byte.
            None => (
                unsafe { stream.alloc::<u8>(bytes.max(1)) }.map_err(drv)?,
                bytes.max(1),
            ),
        };
        let ptr = slice.device_ptr(stream).0;
        if zero_bytes > 0 {
            // SAFETY: `ptr` holds at least `zero_bytes` bytes; the memset is ordered on the stream.
            unsafe { result::memset_d8_async(ptr, 0, zero_bytes, stream.cu_stream()) }
                .map_err(drv)?;
        }
        Ok(Self {
            slice: Some(slice),
            ptr,
            key,
            used: bytes.max(zero_bytes),
        })
    }

    pub fn slice(&self) -> &CudaSlice<u8> {
        self.slice
            .as_ref()
            .expect("a record holds its memory until dropped")
    }
}

/// Queues the memset that zeroes `bytes` at `ptr` after the work on `stream`; false where it cannot
/// (the stream is being captured, so the memset would join the graph, or the driver refused).
fn zero_after(stream: &CudaStream, ptr: u64, bytes: usize) -> bool {
    let idle = stream
        .capture_status()
        .is_ok_and(|s| s == CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE);
    // SAFETY: the record holds at least `bytes` bytes at `ptr` until the memset has run: its memory
    // is freed, if ever, in the stream's order.
    idle && stream.context().bind_to_thread().is_ok()
        && unsafe { result::memset_d8_async(ptr, 0, bytes, stream.cu_stream()) }.is_ok()
}

impl Drop for Record {
    fn drop(&mut self) {
        let Some(slice) = self.slice.take() else {
            return;
        };
        let mut kept = kept().lock().unwrap_or_else(|e| e.into_inner());
        let list = kept.entry(self.key).or_default();
        // A full list frees the record: nothing to zero.
        if list.len() >= KEPT {
            return;
        }
        // Another thread's handle of the per-thread stream names another stream: no memset there.
        let own_stream = StreamKey::of(slice.stream()) == self.key;
        let zeroed = own_stream && zero_after(slice.stream(), self.ptr, self.used);
        list.push(Kept { slice, zeroed });
    }
}
