//! Fused ops of the GPT-2 block: causal attention on the packed `c_attn` output, linear layers
//! with their bias, GELU or residual add folded in, and layer norm. On CUDA each is one kernel
//! (`kernels/*.cu`; cuBLASLt epilogues for the linear layers); on the CPU they compute the same
//! function. The plain ops are forward only (extraction); the `*_train` ops carry gradients.
mod attention;
mod attention_train;
mod chunked_cross_entropy;
mod cross_entropy;
#[cfg(feature = "cuda")]
mod cuda;
mod grad_sink;
mod layer_norm;
mod linear;
mod linear_train;
mod saved;

pub use attention::{causal_attention, causal_attention_with, AttentionKernel, FUSED_HEAD_DIM};
pub use attention_train::{causal_attention_train, causal_attention_train_with, AttentionGemms};
pub use chunked_cross_entropy::{
    loss_chunk_rows, next_token_cross_entropy_chunked, LOSS_CHUNK_ELEMENTS,
};
pub use cross_entropy::next_token_cross_entropy;
#[cfg(feature = "cuda")]
pub use cuda::host_copy::{PendingCopy, PinnedCopier};
#[cfg(feature = "cuda")]
pub use cuda::pool::{keep_pool_memory, pool_peak_bytes, reset_pool_peak};
pub use grad_sink::{sink_gradients, GradSink, SinkGuard};
pub use layer_norm::{layer_norm, layer_norm_train};
pub use linear::{linear, Epilogue};
pub use linear_train::{linear_train, Activation};
