//! Rows longer than 2^32 elements (64-bit indices end to end). Needs about 9 GB of free memory:
//! `cargo test -p profk --release --test it -- --ignored huge::`.
use anyhow::{ensure, Result};
use candle_core::{Device, Tensor};
use half::bf16;
use profk::{Selector, TopKOptions};

#[test]
#[ignore = "needs about 9 GB of memory; run with --release -- --ignored huge::"]
fn a_row_longer_than_two_to_the_32() -> Result<()> {
    let n = (1usize << 32) + (1 << 20);
    let mut data = vec![bf16::ZERO; n];
    let planted = [(1usize << 32) + 5, 7, (1 << 32) + (1 << 19), n - 1];
    data[planted[0]] = bf16::from_f32(3.0);
    data[planted[1]] = bf16::from_f32(2.0);
    data[planted[2]] = bf16::from_f32(2.0);
    data[planted[3]] = bf16::from_f32(1.0);
    let x = Tensor::from_vec(data, n, &Device::Cpu)?;
    for selector in [Selector::Profk, Selector::Radix] {
        let opts = TopKOptions {
            selector,
            ..TopKOptions::default()
        };
        let got = profk::topk(&x, 6, &opts)?;
        let idx: Vec<i64> = got.indices.to_vec1()?;
        // The four planted values, then the two lowest-index zeros.
        let want: Vec<i64> = planted.iter().map(|&i| i as i64).chain([0, 1]).collect();
        ensure!(idx == want, "{selector:?}: {idx:?}");
        let vals: Vec<f32> = got.values.to_dtype(candle_core::DType::F32)?.to_vec1()?;
        ensure!(vals == vec![3.0, 2.0, 2.0, 1.0, 0.0, 0.0], "{vals:?}");
        ensure!(
            selector != Selector::Profk || got.stats.exact_rows == 0,
            "{:?}",
            got.stats
        );
    }
    Ok(())
}
