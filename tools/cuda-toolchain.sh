#!/usr/bin/env bash
# Build the `cuda` feature without a system CUDA: a pinned CUDA 13.0 toolchain from NVIDIA's pip
# wheels plus link-time stubs of the driver libraries, so that CI (CPU-only) and users without a CUDA
# install can compile the kernels and the Rust code. Usage, from anywhere:
#
#   tools/cuda-toolchain.sh cargo check --workspace --all-targets --features cuda    # what CI runs
#   tools/cuda-toolchain.sh cargo build --release --features cuda --bin profk
#   tools/cuda-toolchain.sh env                                                      # print the env
#
# The wheels (~620 MB, and ~200 MB of NCCL) go to $CUDA_PIP_PREFIX (default
# ~/.cache/sparsetrain/cuda-13.0) on first use.
# Pins: CUDA 13.0 to match the H200's driver 580; PTX from a newer nvcc does not load on that driver.
# The stubs (libcuda, libcublas, libcublasLt) satisfy the link only: their file names lack the
# soname, so at run time the GPU machine's real libraries are loaded. NCCL is the real library, on
# LD_LIBRARY_PATH for the commands run through this script.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PREFIX=${CUDA_PIP_PREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/sparsetrain/cuda-13.0}
CU=$PREFIX/site/nvidia/cu13
WHEELS="nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-runtime==13.0.96
        nvidia-cuda-cccl==13.0.85 nvidia-cuda-nvrtc==13.0.88 nvidia-curand==10.4.0.35"
# NCCL 2.30, the version of cudarc's default NCCL bindings (the `cuda` feature of `collective`).
NCCL_WHEEL="nvidia-nccl-cu13==2.30.7"
# A target of its own: pip --target does not add to an existing nvidia/ directory.
NCCL=$PREFIX/nccl/nvidia/nccl

die() { echo "cuda-toolchain: $*" >&2; exit 1; }
command -v g++ >/dev/null || die "needs g++ (Debian: apt-get install -y g++)"
command -v python3 >/dev/null || die "needs python3 with pip"

if [ ! -x "$CU/bin/nvcc" ]; then
  echo "cuda-toolchain: installing CUDA 13.0 wheels into $PREFIX" >&2
  # shellcheck disable=SC2086
  python3 -m pip install -q --disable-pip-version-check --no-deps --target "$PREFIX/site" $WHEELS ||
    die "pip could not install the CUDA wheels"
fi
[ -x "$CU/bin/nvcc" ] || die "no nvcc under $CU/bin after the install"
if [ ! -e "$NCCL/lib/libnccl.so.2" ]; then
  echo "cuda-toolchain: installing $NCCL_WHEEL into $PREFIX" >&2
  python3 -m pip install -q --disable-pip-version-check --no-deps --target "$PREFIX/nccl" "$NCCL_WHEEL" ||
    die "pip could not install $NCCL_WHEEL"
fi
[ -e "$NCCL/lib/libnccl.so.2" ] || die "no libnccl.so.2 under $NCCL/lib after the install"
ln -sf libnccl.so.2 "$NCCL/lib/libnccl.so"
# Unversioned names the linker looks for (-lcudart -lnvrtc -lcurand).
for l in cudart.so.13 nvrtc.so.13 curand.so.10; do ln -sf "lib$l" "$CU/lib/lib${l%.so.*}.so"; done

# Link stubs generated from the bindings of the cudarc version in Cargo.lock: every function the
# bindings declare gets an empty body in a shared library with the real soname.
(cd "$ROOT" && cargo fetch -q) || die "cargo fetch failed"
REG=${CARGO_HOME:-$HOME/.cargo}/registry/src
CUDARC=$(grep -A1 '^name = "cudarc"$' "$ROOT/Cargo.lock" | sed -n 's/^version = "\(.*\)"$/\1/p' | head -1)
[ -n "$CUDARC" ] || die "cudarc is not in Cargo.lock"
mkdir -p "$CU/lib/stubs"
stub() { # soname, file name, cudarc sys module
  local c="$CU/lib/stubs/$2.c" t
  t=$(mktemp)
  cat "$REG"/*/cudarc-"$CUDARC"/src/"$3"/sys/mod.rs | grep -o 'pub unsafe fn [A-Za-z0-9_]*(' |
    sed 's/pub unsafe fn \(.*\)(/void \1(void){}/' | sort -u >"$t"
  [ -s "$t" ] || die "no cudarc $CUDARC sources under $REG"
  if ! cmp -s "$t" "$c" || [ ! -e "$CU/lib/stubs/$2" ]; then
    mv "$t" "$c"
    gcc -shared -fPIC -w -Wl,-soname,"$1" -o "$CU/lib/stubs/$2" "$c"
  else
    rm -f "$t"
  fi
}
stub libcuda.so.1 libcuda.so driver
stub libcublas.so.13 libcublas.so cublas
stub libcublasLt.so.13 libcublasLt.so cublaslt

# candle-kernels builds with cudaforge: it needs the compute capability (there is no GPU to ask) and
# a thread count; profk's build.rs uses NVCC and CUDA_HOME.
export PATH="$CU/bin:$PATH" NVCC="$CU/bin/nvcc" CUDA_HOME="$CU" CUDA_PATH="$CU" \
  CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-90} CUDARC_CUDA_VERSION=13000 \
  CUDAFORGE_THREADS=${CUDAFORGE_THREADS:-$(nproc)} \
  LIBRARY_PATH="$CU/lib:$CU/lib/stubs:$NCCL/lib${LIBRARY_PATH:+:$LIBRARY_PATH}" \
  LD_LIBRARY_PATH="$NCCL/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
[ $# -gt 0 ] || die "usage: tools/cuda-toolchain.sh <command> [args...] (e.g. cargo check --features cuda)"
if [ "$1" = env ]; then
  env | grep -E '^(NVCC|CUDA_|CUDARC_|CUDAFORGE_|LIBRARY_PATH|LD_LIBRARY_PATH|PATH)='
  exit 0
fi
exec "$@"
