//! The integration tests of this crate, one module per former test file, linked as one binary.

mod corpus_datasets;
mod fuzz_parsers;
mod prefetch;
mod shards;
