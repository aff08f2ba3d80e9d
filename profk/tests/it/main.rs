//! The integration tests of this crate, one module per former test file, linked as one binary.
//! graph_capture.rs stays its own binary: it checks that replays take no device memory, which
//! tests allocating beside it in one process would upset.

#[path = "../common/mod.rs"]
mod common;

mod accumulate;
mod huge;
mod params;
mod properties;
mod rows;
mod selection;
mod statistics;

/// The parameters' reference computations (examples/params_accuracy.rs reads them too).
#[path = "../support/hypergeometric.rs"]
mod hypergeometric;
