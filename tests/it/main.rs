//! The integration tests of this crate, one module per former test file, linked as one binary.

mod corpus_forms;
mod features_cli;
mod model_families;
mod profk_cli;
mod report_cli;
mod robust_extract;
mod signals;
