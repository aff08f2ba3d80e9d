//! What logging costs a training step: the time `MetricsSink::log` takes on the training thread, and the
//! training loop's own overhead per step (a trainer whose step does nothing), logging every step.
//!
//! cargo run --release -p eval --example sink_overhead

use harness::{
    LogConfig, LoopConfig, Metrics, MetricsSink, Progress, Record, RunDir, SinkOptions,
    StepContext, StepOutput, Trainer,
};
use runtime::signal::StopSignal;
use std::{path::Path, time::Instant};

fn metrics(step: u64) -> Metrics {
    (0..10)
        .map(|i| (format!("metric_{i}"), step as f64 / (i + 1) as f64))
        .collect()
}

struct Idle;

impl Trainer for Idle {
    type Error = harness::Error;
    fn step(&mut self, ctx: StepContext) -> Result<StepOutput, harness::Error> {
        Ok(StepOutput {
            tokens: 4096,
            metrics: metrics(ctx.step),
        })
    }
    fn save_checkpoint(&mut self, _: &Path, _: &Progress) -> Result<(), harness::Error> {
        Ok(())
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() -> harness::Result<()> {
    let tmp = std::env::temp_dir().join(format!("sink-overhead-{}", std::process::id()));
    let n = 100_000u64;

    let run = RunDir::create(&tmp, "log")?;
    let sink = MetricsSink::create(&run, SinkOptions::default())?;
    let mut costs = Vec::with_capacity(n as usize);
    for step in 1..=n {
        let record = Record::train(step, step * 4096, step as f64, metrics(step));
        let t = Instant::now();
        sink.log(record);
        costs.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let t = Instant::now();
    sink.finish()?;
    let drain_ms = t.elapsed().as_secs_f64() * 1e3;
    costs.sort_by(f64::total_cmp);

    let run = RunDir::create(&tmp, "loop")?;
    let sink = MetricsSink::create(&run, SinkOptions::default())?;
    let log = LogConfig {
        progress: false,
        ..LogConfig::default()
    };
    let mut cfg = LoopConfig::new(n, &log);
    cfg.final_eval = false;
    let t = Instant::now();
    harness::train_loop::run(
        &mut Idle,
        &run,
        &sink,
        &cfg,
        Progress::default(),
        &StopSignal::new(),
    )?;
    let loop_us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    sink.finish()?;
    let bytes = std::fs::metadata(run.metrics_path())
        .map(|m| m.len())
        .unwrap_or(0);

    println!("| measure ({n} records of 10 metrics) | value |");
    println!("|---|---|");
    println!(
        "| MetricsSink::log, median | {:.2} µs |",
        percentile(&costs, 0.5)
    );
    println!(
        "| MetricsSink::log, p99 | {:.2} µs |",
        percentile(&costs, 0.99)
    );
    println!(
        "| MetricsSink::log, max | {:.1} µs |",
        percentile(&costs, 1.0)
    );
    println!("| finish() after the burst (writer drains the queue) | {drain_ms:.1} ms |");
    println!("| train_loop::run overhead per step, logging every step | {loop_us:.2} µs |");
    println!("| metrics.jsonl size per record | {} bytes |", bytes / n);
    std::fs::remove_dir_all(&tmp).ok();
    Ok(())
}
