//! Compiles `kernels/ef.cu` into a fatbin under the `cuda` feature (see the `cuda-build` crate),
//! embedded by `src/cuda.rs`.
fn main() {
    cuda_build::compile(&["ef"], None);
}
