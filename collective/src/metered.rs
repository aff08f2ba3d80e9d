//! A collective that counts what its rank hands to the wire and the time spent in the calls, so
//! that every train record can log `wire_bytes` and `collective_ms`.

use crate::{Collective, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes this rank handed to the collectives and the wall time inside them, since the start.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WireCount {
    /// Sum of the buffers this rank passed: an all-reduce of G bytes counts G, a gather this
    /// rank's own bytes, a broadcast the root's bytes on the root.
    pub bytes: u64,
    pub time: Duration,
}

impl WireCount {
    /// What happened between `earlier` and `self`.
    pub fn since(self, earlier: WireCount) -> WireCount {
        WireCount {
            bytes: self.bytes - earlier.bytes,
            time: self.time.saturating_sub(earlier.time),
        }
    }

    pub fn ms(&self) -> f64 {
        self.time.as_secs_f64() * 1e3
    }
}

/// Wraps a collective and meters every call (the device all-reduce included).
pub struct Metered {
    inner: Arc<dyn Collective>,
    bytes: AtomicU64,
    nanos: AtomicU64,
}

impl Metered {
    pub fn new(inner: Arc<dyn Collective>) -> Metered {
        Metered {
            inner,
            bytes: AtomicU64::new(0),
            nanos: AtomicU64::new(0),
        }
    }

    /// The totals so far; subtract two readings with [`WireCount::since`].
    pub fn count(&self) -> WireCount {
        WireCount {
            bytes: self.bytes.load(Ordering::Relaxed),
            time: Duration::from_nanos(self.nanos.load(Ordering::Relaxed)),
        }
    }

    fn metered<R>(&self, bytes: usize, call: impl FnOnce() -> R) -> R {
        let t0 = Instant::now();
        let out = call();
        self.nanos
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        out
    }
}

impl Collective for Metered {
    fn rank(&self) -> usize {
        self.inner.rank()
    }

    fn world(&self) -> usize {
        self.inner.world()
    }

    fn all_reduce_sum_f32(&self, buf: &mut [f32]) -> Result<()> {
        self.metered(size_of_val(buf), || self.inner.all_reduce_sum_f32(buf))
    }

    fn all_reduce_sum_f64(&self, buf: &mut [f64]) -> Result<()> {
        self.metered(size_of_val(buf), || self.inner.all_reduce_sum_f64(buf))
    }

    fn all_reduce_sum_u64(&self, buf: &mut [u64]) -> Result<()> {
        self.metered(size_of_val(buf), || self.inner.all_reduce_sum_u64(buf))
    }

    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.metered(mine.len(), || self.inner.all_gather_bytes(mine))
    }

    fn broadcast_bytes(&self, root: usize, buf: &mut Vec<u8>) -> Result<()> {
        let sent = if self.rank() == root { buf.len() } else { 0 };
        self.metered(sent, || self.inner.broadcast_bytes(root, buf))
    }

    fn barrier(&self) -> Result<()> {
        self.metered(0, || self.inner.barrier())
    }

    /// Waits for the device around the call, so that the time is the all-reduce's own.
    fn all_reduce_sum_device(
        &self,
        t: &candle_core::Tensor,
    ) -> Option<Result<candle_core::Tensor>> {
        let sync = |t: &candle_core::Tensor| {
            t.device()
                .synchronize()
                .map_err(|e| crate::Error::Call(format!("device synchronize: {e}")))
        };
        if let Err(e) = sync(t) {
            return Some(Err(e));
        }
        let bytes = crate::tensor_bytes(t) as usize;
        self.metered(bytes, || {
            let out = self.inner.all_reduce_sum_device(t)?;
            Some(out.and_then(|o| sync(&o).map(|()| o)))
        })
    }
}
