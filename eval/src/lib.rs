//! Evaluation of runs and of the dictionaries they train: the run-comparison report (step and
//! selection time, Prof-K's speed-up, every metric over steps, where each run ran) and the feature
//! dashboards it shows.
//!
//! It reads what the run harness (`harness`) writes; nothing here takes part in training.

pub mod report;
