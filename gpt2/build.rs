//! Compiles the CUDA kernels under the `cuda` feature (see the `cuda-build` crate): one fatbin per kernel
//! family, embedded by `src/ops/cuda/`.
fn main() {
    cuda_build::compile(
        &[
            "attention",
            "attention_train",
            "cross_entropy",
            "layer_norm",
            "linear_train",
        ],
        None,
    );
}
