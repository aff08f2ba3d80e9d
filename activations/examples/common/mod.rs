//! What the op benchmarks share: the timing loop and the device flag.
#![allow(dead_code)]
use candle_core::Device;
use std::time::Instant;

/// Median seconds of `f` over `iters` runs (at least one) after `warmup` runs, the device
/// synchronized after each.
pub fn median_secs<E: From<candle_core::Error>>(
    dev: &Device,
    warmup: usize,
    iters: usize,
    mut f: impl FnMut() -> Result<(), E>,
) -> Result<f64, E> {
    for _ in 0..warmup {
        f()?;
    }
    dev.synchronize()?;
    let mut v = Vec::with_capacity(iters.max(1));
    for _ in 0..iters.max(1) {
        let t0 = Instant::now();
        f()?;
        dev.synchronize()?;
        v.push(t0.elapsed().as_secs_f64());
    }
    v.sort_by(f64::total_cmp);
    Ok(v[v.len() / 2])
}

/// `--device`: cpu or cuda (the first GPU).
pub fn device(name: &str) -> anyhow::Result<Device> {
    match name {
        "cpu" => Ok(Device::Cpu),
        "cuda" => Ok(Device::new_cuda(0)?),
        other => anyhow::bail!("--device: expected cpu or cuda, got {other}"),
    }
}
