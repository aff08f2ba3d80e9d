//! Fused forward ops of the GPT-2 block: causal attention on the packed `c_attn` output, linear
//! layers with their bias, GELU or residual add folded in, and layer norm. On CUDA each is one
//! kernel (`kernels/*.cu`; cuBLASLt epilogues for the linear layers); on the CPU they compute the
//! same function from candle ops. Forward only: they carry no gradient.
mod attention;
#[cfg(feature = "cuda")]
mod cuda;
mod layer_norm;
mod linear;

pub use attention::{causal_attention, causal_attention_with, AttentionKernel, FUSED_HEAD_DIM};
#[cfg(feature = "cuda")]
pub use cuda::host_copy::{PendingCopy, PinnedCopier};
pub use layer_norm::layer_norm;
pub use linear::{linear, Epilogue};
