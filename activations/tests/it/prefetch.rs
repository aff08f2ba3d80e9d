//! The producer thread overlaps data preparation with the training step: with both slowed down, N steps
//! take about the longer of the two, not their sum; the stream and its end are the same inline.
use activations::prefetch::{ChunkSource, Prefetch};
use activations::Result;
use candle_core::{Device, Tensor};
use std::time::{Duration, Instant};

/// Chunks 0, 1, 2, ... of one row each, every one taking `delay` to make.
struct Slow {
    next: u32,
    end: u32,
    delay: Duration,
}

impl ChunkSource for Slow {
    fn next_chunk(&mut self) -> Result<Option<Tensor>> {
        if self.next == self.end {
            return Ok(None);
        }
        std::thread::sleep(self.delay);
        self.next += 1;
        Ok(Some(Tensor::new(&[self.next - 1], &Device::Cpu)?))
    }
}

fn run(depth: usize, read: Duration, step: Duration, steps: u32) -> (Vec<u32>, Duration) {
    let t0 = Instant::now();
    let source = Slow {
        next: 0,
        end: steps,
        delay: read,
    };
    let mut p = Prefetch::new(Box::new(source), depth, "test").unwrap();
    let mut seen = Vec::new();
    while let Some(c) = p.pull().unwrap() {
        seen.push(c.to_vec1::<u32>().unwrap()[0]);
        std::thread::sleep(step);
    }
    assert!(p.pull().unwrap().is_none(), "the end is sticky");
    (seen, t0.elapsed())
}

#[test]
fn steps_take_the_longer_of_read_and_step_not_the_sum() {
    let (read, step, n) = (Duration::from_millis(30), Duration::from_millis(30), 12);
    let (inline, t_inline) = run(0, read, step, n);
    let (ahead, t_ahead) = run(2, read, step, n);
    assert_eq!(inline, (0..n).collect::<Vec<_>>());
    assert_eq!(ahead, inline);
    let sum = (read + step) * n;
    let max = read.max(step) * n;
    assert!(
        t_inline >= sum,
        "inline took {t_inline:?}, under the sum {sum:?}"
    );
    assert!(t_ahead >= max, "{t_ahead:?}");
    // One read before the first step can't overlap; allow scheduling slack on a busy machine.
    assert!(
        t_ahead < max + read + (sum - max) / 2,
        "prefetching took {t_ahead:?}: not overlapped (max {max:?}, sum {sum:?})"
    );
}

#[test]
fn a_failing_producer_reports_its_error_and_stops() {
    struct Failing(u32);
    impl ChunkSource for Failing {
        fn next_chunk(&mut self) -> Result<Option<Tensor>> {
            self.0 += 1;
            if self.0 == 3 {
                return Err(activations::Error::shard(
                    "shard-00007.safetensors",
                    "sha256 differs",
                ));
            }
            Ok(Some(Tensor::new(&[self.0], &Device::Cpu)?))
        }
    }
    let mut p = Prefetch::new(Box::new(Failing(0)), 4, "test").unwrap();
    assert!(p.pull().unwrap().is_some());
    assert!(p.pull().unwrap().is_some());
    let err = p.pull().unwrap_err().to_string();
    assert!(err.contains("shard-00007"), "{err}");
    assert!(p.pull().unwrap().is_none());
}
