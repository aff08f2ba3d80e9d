//! The bytes the sharded selection exchanges, and what a call puts on the wire.
//!
//! A rank's sample message is its block's description followed by the values of the sampled
//! elements it holds, in the draw's order (every rank draws the same global indices, so values
//! need no index). A candidate is its global index (8 bytes, little-endian) and its value.

use super::layout::BLOCK_BYTES;
use crate::params::Params;
use crate::select::key::Element;
use half::{bf16, f16};
use serde::Serialize;

/// An element type the sharded selection ranks and sends: its value as little-endian bits.
pub trait WireValue: Element {
    /// Bytes of one value on the wire.
    const BYTES: usize;
    fn put(self, out: &mut Vec<u8>);
    /// The value in the first [`WireValue::BYTES`] bytes of `bytes`.
    fn get(bytes: &[u8]) -> Self;
}

macro_rules! wire_value {
    ($t:ty, $bits:ty) => {
        impl WireValue for $t {
            const BYTES: usize = size_of::<$bits>();
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_bits().to_le_bytes());
            }
            fn get(bytes: &[u8]) -> Self {
                let mut b = [0u8; size_of::<$bits>()];
                b.copy_from_slice(&bytes[..size_of::<$bits>()]);
                <$t>::from_bits(<$bits>::from_le_bytes(b))
            }
        }
    };
}
wire_value!(f32, u32);
wire_value!(f64, u64);
wire_value!(bf16, u16);
wire_value!(f16, u16);

/// Bytes of one candidate on the wire: global index and value.
pub const fn candidate_bytes(value_bytes: usize) -> usize {
    8 + value_bytes
}

/// Bytes of the count all-reduce: R and the NaN count.
pub const COUNT_BYTES: u64 = 16;

/// What one successful first attempt moves, for values of `value_bytes` bytes over `world` ranks.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct WireBudget {
    pub world: u64,
    pub value_bytes: u64,
    /// The gathered sample: every rank's block description and S values.
    pub sample_gathered: u64,
    /// The count all-reduce's buffer on every rank (R and the NaN count).
    pub counts: u64,
    /// The gathered candidates at the expected R (≈ t·(n+1)/(S+1)).
    pub candidates_expected: u64,
    /// The gathered candidates at the largest accepted R = M.
    pub candidates_max: u64,
    /// Gathered bytes per call at the expected R: what every rank ends up holding.
    pub gathered_expected: u64,
    /// What one rank sends on average: its share of the gathered bytes plus its count buffer.
    pub sent_per_rank: u64,
}

impl WireBudget {
    pub fn new(p: &Params, world: u64, value_bytes: u64) -> WireBudget {
        let world = world.max(1);
        let expected_r = if p.sample == 0 {
            p.k
        } else {
            ((p.t as f64) * (p.n as f64 + 1.0) / (p.sample as f64 + 1.0)).round() as u64
        };
        let per_candidate = candidate_bytes(value_bytes as usize) as u64;
        let sample_gathered = world * BLOCK_BYTES as u64 + p.sample * value_bytes;
        let candidates_expected = expected_r.min(p.n) * per_candidate;
        let gathered_expected = sample_gathered + candidates_expected;
        WireBudget {
            world,
            value_bytes,
            sample_gathered,
            counts: COUNT_BYTES,
            candidates_expected,
            candidates_max: p.capacity * per_candidate,
            gathered_expected,
            sent_per_rank: gathered_expected.div_ceil(world) + COUNT_BYTES,
        }
    }
}
