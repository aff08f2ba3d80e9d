//! Evaluation of runs and of the dictionaries they train: what a dictionary is measured by
//! ([`measures`]: MSE, FVU, CE-loss recovered with the reconstruction spliced in), the held-out
//! positions it is measured on ([`heldout`]), and the run-comparison report with the feature
//! dashboards ([`report`]).
//!
//! Nothing here trains: the measures take a reconstruction function, whatever architecture made it,
//! and the report reads what the run harness (`harness`) writes.

mod error;
pub mod heldout;
pub mod measures;
pub mod report;

pub use error::{Error, Result};
