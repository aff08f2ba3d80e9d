//! Run directories, the metrics sink, the Weights & Biases bridge, the training-loop skeleton shared by
//! the trainers, and the run-comparison report.

pub mod atomic;
pub mod config;
pub mod error;
pub mod interrupt;
pub mod metrics;
pub mod report;
pub mod run_dir;
pub mod train_loop;
pub mod wandb;

pub use atomic::write_atomic;
pub use config::LogConfig;
pub use error::{Error, Result};
pub use interrupt::StopSignal;
pub use metrics::{Metrics, MetricsSink, Record, RecordKind, SinkOptions};
pub use run_dir::{Checkpoint, Progress, RunDir, RunMeta};
pub use train_loop::{LoopConfig, LoopSummary, Outcome, StepContext, StepOutput, Trainer};
pub use wandb::WandbOptions;
