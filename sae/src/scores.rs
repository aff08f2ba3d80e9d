//! The encoder's dense scores `relu(xc · W_encᵀ + b_enc)` as one cuBLASLt matmul on TF32 tensor cores
//! with the bias and the ReLU in its epilogue: the B×n scores are written once, with no pass of their
//! own for the bias and the ReLU. CUDA only; elsewhere [`crate::model::Sae::scores`] computes the same
//! function with candle ops.
use candle_core::CustomOp3;
use runtime::{cpu_fwd, cuda_fwd};

/// xc [B, d], W_enc [n, d], b_enc [n] (f32, contiguous) → relu(xc · W_encᵀ + b_enc) [B, n].
pub(crate) struct ScoresTf32;

impl CustomOp3 for ScoresTf32 {
    fn name(&self) -> &'static str {
        "scores-tf32"
    }

    cpu_fwd!(|_, (_x, _xl), (_w, _wl), (_b, _bl)| {
        candle_core::bail!("scores-tf32 runs on CUDA only")
    });

    cuda_fwd!(|_, (x, xl), (w, wl), (b, bl)| {
        crate::cuda::scores_tf32((x, xl), (w, wl), (b, bl))
    });
}
