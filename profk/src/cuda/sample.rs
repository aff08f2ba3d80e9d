//! Stage 1 (kernels/sample.cu): S distinct indices per pending row by a keyed bijection, gathered.
use candle_core::cuda::cudarc::driver::CudaSlice;

use super::abi::SampleArgs;
use super::launch::Arena;
use super::module::Family;
use super::{Input, Shape};
use crate::Result;

/// Half the bit width of the Feistel domain: the smallest even width 2h with 2^(2h) >= n.
fn half_bits(n: u64) -> i32 {
    let bits = 64 - n.saturating_sub(1).leading_zeros();
    bits.div_ceil(2).max(1) as i32
}

#[allow(clippy::too_many_arguments)]
pub fn draw(
    arena: &Arena,
    input: &Input,
    shape: &Shape,
    s: u64,
    seed: u64,
    attempt: u32,
    run: &CudaSlice<u8>,
    keys: &CudaSlice<u32>,
    idx: &CudaSlice<u64>,
) -> Result<()> {
    let args = SampleArgs {
        x: input.ptr,
        n: shape.n,
        rows: shape.rows,
        mag: input.mag as i32,
        half_bits: half_bits(shape.n),
        s,
        seed,
        attempt,
        pad: 0,
        run: arena.ptr(run),
        skeys: arena.ptr(keys),
        sidx: arena.ptr(idx),
    };
    let grid = arena.grid_for(shape.rows * s, 256, 16);
    arena.launch_struct(Family::Sample, &format!("sample_{}", input.suffix), grid, 256, &args)
}

#[cfg(test)]
mod tests {
    #[test]
    fn feistel_domain_covers_n() {
        for n in [1u64, 2, 3, 4, 5, 1000, 1 << 20, (1 << 20) + 1, 3 << 30, 1 << 40] {
            let h = super::half_bits(n);
            assert!(1u128 << (2 * h) >= n as u128, "n = {n}");
            assert!(n <= 2 || (1u128 << (2 * h)) <= 4 * n as u128, "n = {n}");
        }
    }
}
