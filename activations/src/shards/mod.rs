//! Activation shards: safetensors files of a fixed number of tokens plus `manifest.json`;
//! written by [`extract`], read back shuffled by [`ShardReader`].
mod extract;
mod manifest;
mod pipeline;
mod reader;
mod shard_file;
mod verified;

pub use extract::{extract, ExtractConfig, ExtractCorpus, ExtractOptions, ExtractReport};
pub use manifest::{
    dtype_name, CorpusInfo, Manifest, ShardInfo, ACTIVATIONS_TENSOR, FORMAT, MANIFEST_FILE,
    TOKENS_TENSOR,
};
pub use reader::{ReaderOptions, ShardReader};
pub use shard_file::shard_file_name;
