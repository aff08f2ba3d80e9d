//! The run harness every training command shares: run directories, the launcher (lock, resume check,
//! metadata, sink, loop), the training-loop skeleton, the metrics sink and the Weights & Biases bridge.
//! The config source, device opener, directory lock and stop signal it uses live in `runtime`, below
//! the data layer; the report that reads its run directories lives in `eval`.
//!
//! A trainer implements [`Trainer`]; the commands wire the rest through [`launch::Launch`] (run
//! directory, lock, resume check, metadata, sink, loop, report). Underneath, the pieces are:
//!
//! ```
//! use harness::{LogConfig, LoopConfig, Metrics, MetricsSink, Progress, RunDir, RunMeta, SinkOptions,
//!               StepContext, StepOutput, Trainer};
//! use runtime::signal::StopSignal;
//! use std::path::Path;
//!
//! struct Counter { x: f64 }
//! impl Trainer for Counter {
//!     type Error = harness::Error;
//!     fn step(&mut self, ctx: StepContext) -> Result<StepOutput, harness::Error> {
//!         self.x *= 0.9;
//!         let mut metrics = Metrics::new();
//!         metrics.insert("loss".into(), self.x);
//!         metrics.insert("select_ms".into(), 0.01); // the loop adds step_ms and select_share
//!         Ok(StepOutput { tokens: 128, metrics })
//!     }
//!     fn save_checkpoint(&mut self, dir: &Path, _: &Progress) -> Result<(), harness::Error> {
//!         harness::write_atomic(&dir.join("state.json"), format!("{}", self.x).as_bytes())
//!     }
//! }
//!
//! # let tmp = tempfile::tempdir().unwrap();
//! let log = LogConfig::default(); // the config's [log] section
//! let run = RunDir::create(&tmp.path().join("runs"), "tiny-profk")?; // or RunDir::create_at(--out)
//! let meta = RunMeta { config_name: "tiny".into(), selector: "profk".into(), task: "sae".into(),
//!                      ..RunMeta::default() };
//! run.write_meta(&meta)?;
//! run.write_config("[train]\nsteps = 20\n", &serde_json::json!({"train": {"steps": 20}}))?;
//! let sink = MetricsSink::create(&run, SinkOptions::for_run(&run, &meta, &log))?;
//! // --resume: let ckpt = harness::train_loop::resume_point(&run)?; load ckpt.dir; start = ckpt.progress;
//! //           MetricsSink::resume(&run, ckpt.progress.step, ...)
//! let mut cfg = LoopConfig::new(20, &log);
//! cfg.checkpoint_every = 10;
//! cfg.progress_bar = false;
//! let stop = StopSignal::new(); // a binary takes StopSignal::install()? (SIGINT, SIGTERM)
//! let summary = harness::train_loop::run(&mut Counter { x: 1.0 }, &run, &sink, &cfg,
//!                                     Progress::default(), &stop)?;
//! assert_eq!(summary.progress.step, 20);
//! sink.finish()?;
//! // eval::report::write_run_report(&run) then writes <run>/report.html
//! # Ok::<(), harness::Error>(())
//! ```

pub mod atomic;
pub mod config;
pub mod config_reference;
pub mod error;
pub mod latent_density;
pub mod launch;
pub mod metrics;
pub mod output_path;
pub mod progress;
pub mod provenance;
pub mod ranks;
pub mod run_dir;
pub mod selector;
pub mod train_loop;
pub mod wandb;
pub mod watchdog;

pub use atomic::write_atomic;
pub use config::LogConfig;
pub use error::{Error, Result};
pub use launch::{Finished, Launch, LaunchSpec};
pub use metrics::{Metrics, MetricsSink, Record, RecordKind, SinkOptions};
pub use output_path::check_output_path;
pub use provenance::{BuildInfo, Provenance};
pub use ranks::RankGroup;
pub use run_dir::{Checkpoint, Progress, RunDir, RunMeta};
pub use selector::SelectorConfig;
pub use train_loop::{
    CheckpointImage, ImageError, LoopConfig, LoopSummary, Outcome, StepContext, StepOutput, Trainer,
};
pub use wandb::WandbOptions;
