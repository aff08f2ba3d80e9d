//! Compiles the CUDA kernels under the `cuda` feature (see the `cuda-build` crate): one fatbin per kernel
//! family, and `kernels/cub_sort.cu` (CUB's device-wide sorts, host-launched) as a static library.
fn main() {
    cuda_build::compile(
        &[
            "sample",
            "filter",
            "select",
            "baselines",
            "accumulate",
            "rows",
        ],
        Some(cuda_build::HostLibrary {
            source: "cub_sort",
            lib: "profk_cub",
        }),
    );
}
