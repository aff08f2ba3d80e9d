//! Compiles the CUDA kernels under the `cuda` feature; the CPU build needs no CUDA toolchain.
//!
//! Each kernel family in `kernels/*.cu` becomes a fatbin for sm_90 with compute_90 PTX beside it
//! (machine code checked here, PTX for newer GPUs), embedded with `include_bytes!` and loaded at run
//! time without JIT. `kernels/cub_sort.cu` (CUB's device-wide sorts, host-launched) is compiled to an
//! object, archived as a static library and linked with the CUDA runtime. nvcc is `$NVCC`, else
//! `$CUDA_HOME/bin/nvcc`, else `nvcc` on the PATH (`tools/cuda-toolchain.sh` provides one).
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const FATBINS: [&str; 5] = ["sample", "filter", "select", "baselines", "accumulate"];
const ARCH: &str = "-gencode=arch=compute_90,code=[sm_90,compute_90]";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=kernels");
    println!("cargo:rerun-if-env-changed=NVCC");
    println!("cargo:rerun-if-env-changed=CUDA_HOME");
    if env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let cuda_home = env::var("CUDA_HOME")
        .or_else(|_| env::var("CUDA_PATH"))
        .ok()
        .map(PathBuf::from);
    let nvcc = env::var("NVCC")
        .map(PathBuf::from)
        .unwrap_or_else(|_| match &cuda_home {
            Some(home) => home.join("bin/nvcc"),
            None => PathBuf::from("nvcc"),
        });
    let mut includes = Vec::new();
    if let Some(home) = &cuda_home {
        // The pip wheels keep CCCL (CUB, Thrust) under include/cccl.
        for dir in ["include", "include/cccl"] {
            if home.join(dir).is_dir() {
                includes.push(format!("-I{}", home.join(dir).display()));
            }
        }
    }
    let common = |cmd: &mut Command| {
        cmd.args(["-std=c++17", "-O3", ARCH, "-Xptxas=-warn-spills"])
            .args(&includes);
    };

    let mut jobs: Vec<(String, Command)> = FATBINS
        .iter()
        .map(|name| {
            let mut cmd = Command::new(&nvcc);
            common(&mut cmd);
            cmd.arg("--fatbin")
                .arg("-o")
                .arg(out.join(format!("{name}.fatbin")));
            cmd.arg(Path::new("kernels").join(format!("{name}.cu")));
            (name.to_string(), cmd)
        })
        .collect();
    let obj = out.join("cub_sort.o");
    let mut cub = Command::new(&nvcc);
    common(&mut cub);
    cub.args(["-c", "-Xcompiler", "-fPIC", "-o"])
        .arg(&obj)
        .arg("kernels/cub_sort.cu");
    jobs.push(("cub_sort".into(), cub));

    // nvcc is slow and single-threaded: the six compilations run side by side.
    let handles: Vec<_> = jobs
        .into_iter()
        .map(|(name, mut cmd)| {
            std::thread::spawn(move || {
                let status = cmd
                    .status()
                    .unwrap_or_else(|e| panic!("cannot run nvcc for {name}: {e}"));
                assert!(status.success(), "nvcc failed on kernels/{name}.cu");
            })
        })
        .collect();
    for h in handles {
        h.join().expect("nvcc job panicked");
    }

    let lib = out.join("libprofk_cub.a");
    let _ = std::fs::remove_file(&lib);
    let status = Command::new("ar")
        .arg("crs")
        .arg(&lib)
        .arg(&obj)
        .status()
        .expect("cannot run ar");
    assert!(status.success(), "ar failed");
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static=profk_cub");
    if let Some(home) = &cuda_home {
        for dir in ["lib", "lib64"] {
            if home.join(dir).is_dir() {
                println!(
                    "cargo:rustc-link-search=native={}",
                    home.join(dir).display()
                );
            }
        }
    }
    println!("cargo:rustc-link-lib=dylib=cudart");
    println!("cargo:rustc-link-lib=dylib=stdc++");
}
