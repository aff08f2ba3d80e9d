//! Under the `cuda` feature, compiles each kernel family in `kernels/*.cu` into a fatbin (sm_90
//! machine code plus compute_90 PTX) that `src/ops/cuda/` embeds and loads without JIT. nvcc is `$NVCC`,
//! else `$CUDA_HOME/bin/nvcc`, else `nvcc` on the PATH. The CPU build needs no CUDA toolchain.
use std::env;
use std::path::PathBuf;
use std::process::Command;

const FAMILIES: [&str; 2] = ["attention", "layer_norm"];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=kernels");
    println!("cargo:rerun-if-env-changed=NVCC");
    println!("cargo:rerun-if-env-changed=CUDA_HOME");
    if env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let nvcc =
        env::var("NVCC")
            .map(PathBuf::from)
            .unwrap_or_else(|_| match env::var("CUDA_HOME") {
                Ok(home) => PathBuf::from(home).join("bin/nvcc"),
                Err(_) => PathBuf::from("nvcc"),
            });
    // nvcc is single-threaded: the families compile side by side.
    let jobs: Vec<_> = FAMILIES
        .iter()
        .map(|name| {
            let mut cmd = Command::new(&nvcc);
            cmd.args([
                "-std=c++17",
                "-O3",
                "-gencode=arch=compute_90,code=[sm_90,compute_90]",
                "-Xptxas=-warn-spills",
                "--fatbin",
                "-o",
            ])
            .arg(out.join(format!("{name}.fatbin")))
            .arg(format!("kernels/{name}.cu"));
            std::thread::spawn(move || {
                let status = cmd
                    .status()
                    .unwrap_or_else(|e| panic!("cannot run nvcc for {name}: {e}"));
                assert!(status.success(), "nvcc failed on kernels/{name}.cu");
            })
        })
        .collect();
    for job in jobs {
        job.join().expect("nvcc job panicked");
    }
}
