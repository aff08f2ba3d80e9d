//! Compiles the CUDA kernels under the `cuda` feature (see the `cuda-build` crate): `kernels/sparse.cu`
//! and `kernels/optim.cu` as fatbins, `kernels/sort.cu` (CUB's radix sort, host-launched) as a static
//! library.
fn main() {
    cuda_build::compile(
        &["sparse", "optim"],
        Some(cuda_build::HostLibrary {
            source: "sort",
            lib: "sae_cub",
        }),
    );
}
