//! Build-script support shared by the crates with CUDA kernels.
//!
//! Under the calling crate's `cuda` feature, each kernel family `kernels/<name>.cu` becomes a fatbin for
//! sm_90 with compute_90 PTX beside it (machine code checked at build time, PTX for newer GPUs), which the
//! crate embeds with `include_bytes!(concat!(env!("OUT_DIR"), "/<name>.fatbin"))` and loads without JIT.
//! A host-launched source (CUB's device-wide algorithms) becomes a static library linked with the CUDA
//! runtime. nvcc is `$NVCC`, else `$CUDA_HOME/bin/nvcc` (or `$CUDA_PATH`), else `nvcc` on the PATH
//! (`tools/cuda-toolchain.sh` provides one). Without the feature nothing runs, so the CPU build needs no
//! CUDA toolchain.
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const ARCH: &str = "-gencode=arch=compute_90,code=[sm_90,compute_90]";

/// A host-launched kernel source compiled to `lib<lib>.a` and linked statically.
pub struct HostLibrary<'a> {
    /// Stem of `kernels/<source>.cu`.
    pub source: &'a str,
    /// Name of the static library.
    pub lib: &'a str,
}

/// Compiles `kernels/<name>.cu` for every name in `fatbins` (and `host`, if any) into `OUT_DIR`.
/// Panics with the failing file's name: a build script has no other way to report.
pub fn compile(fatbins: &[&str], host: Option<HostLibrary>) {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=kernels");
    for var in ["NVCC", "CUDA_HOME", "CUDA_PATH", "CUDA_LINEINFO"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
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
    let nvcc_for = |name: &str| {
        let mut cmd = Command::new(&nvcc);
        cmd.args(["-std=c++17", "-O3", ARCH, "-Xptxas=-warn-spills"])
            .args(&includes);
        // CUDA_LINEINFO=1: line tables, so that a profiler maps its counters to source lines (the
        // code is the same; the binaries grow).
        if env::var_os("CUDA_LINEINFO").is_some_and(|v| v == "1") {
            cmd.arg("-lineinfo");
        }
        (name.to_string(), cmd)
    };

    let mut jobs: Vec<(String, Command)> = fatbins
        .iter()
        .map(|name| {
            let (name, mut cmd) = nvcc_for(name);
            cmd.args(["--fatbin", "-o"])
                .arg(out.join(format!("{name}.fatbin")))
                .arg(Path::new("kernels").join(format!("{name}.cu")));
            (name, cmd)
        })
        .collect();
    let host = host.map(|h| {
        let obj = out.join(format!("{}.o", h.source));
        let (name, mut cmd) = nvcc_for(h.source);
        cmd.args(["-c", "-Xcompiler", "-fPIC", "-o"])
            .arg(&obj)
            .arg(Path::new("kernels").join(format!("{name}.cu")));
        jobs.push((name, cmd));
        (obj, h.lib)
    });

    // nvcc is slow and single-threaded: the families compile side by side.
    let handles: Vec<_> = jobs
        .into_iter()
        .map(|(name, mut cmd)| {
            std::thread::spawn(move || {
                let status = cmd
                    .status()
                    .unwrap_or_else(|e| panic!("cannot run nvcc for kernels/{name}.cu: {e}"));
                assert!(status.success(), "nvcc failed on kernels/{name}.cu");
            })
        })
        .collect();
    for h in handles {
        h.join().expect("nvcc job panicked");
    }

    if let Some((obj, lib)) = host {
        link_static(&out, &obj, lib, cuda_home.as_deref());
    }
}

/// Archives `obj` as `lib<lib>.a` and links it with the CUDA runtime and the C++ library.
fn link_static(out: &Path, obj: &Path, lib: &str, cuda_home: Option<&Path>) {
    let archive = out.join(format!("lib{lib}.a"));
    let _ = std::fs::remove_file(&archive);
    let status = Command::new("ar")
        .arg("crs")
        .arg(&archive)
        .arg(obj)
        .status()
        .expect("cannot run ar");
    assert!(status.success(), "ar failed on {}", archive.display());
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static={lib}");
    if let Some(home) = cuda_home {
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
