#!/usr/bin/env bash
# Builds bench/peers/topk_peers.cu (FlashInfer and CUB DeviceTopK beside Prof-K) and packs it,
# stripped and xz'd, as .devbin/topk_peers.xz for bench/peers/topk_peers.sh (run here, on the machine
# without a GPU, from the repository root):
#   bash bench/peers/build_topk_peers.sh
# Both peers come from their own headers in the flashinfer-python wheel: FlashInfer's include/ and
# the CCCL it bundles (CUB's DeviceTopK is newer than the CCCL of the pinned toolchain). The wheel is
# downloaded once into .whl/. nvcc is the pinned one (tools/cuda-toolchain.sh); cudart links
# statically, so the binary needs only the driver on the GPU machine. Set CUDART=shared to link it
# dynamically instead.
set -euo pipefail
WHEEL=flashinfer-python==0.7.2.post1
W=.whl
H=$W/flashinfer-0.7.2.post1
if [ ! -d "$H/flashinfer/data/include/flashinfer" ]; then
  ls "$W"/flashinfer_python-0.7.2.post1-*.whl >/dev/null 2>&1 ||
    python3 -m pip download -q --disable-pip-version-check --no-deps -d "$W" "$WHEEL"
  mkdir -p "$H"
  unzip -qo "$W"/flashinfer_python-0.7.2.post1-*.whl -d "$H" 'flashinfer/data/include/*' \
    'flashinfer/data/cccl/cub/*' 'flashinfer/data/cccl/libcudacxx/include/*' 'flashinfer/data/cccl/thrust/*'
fi
while IFS= read -r line; do export "${line?}"; done < <(tools/cuda-toolchain.sh env)
D=$H/flashinfer/data
mkdir -p .devbin
LOG=.devbin/topk_peers.build.log
# The bundled CCCL must come before the toolchain's own (an older CCCL that nvcc adds itself), so
# every header directory is an -I; warnings are errors.
if ! "$NVCC" -O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr --cudart "${CUDART:-static}" \
  -Xcompiler -Wall -Werror all-warnings \
  -I "$D/include" -I "$D/cccl/cub" -I "$D/cccl/libcudacxx/include" -I "$D/cccl/thrust" bench/peers/topk_peers.cu -o .devbin/topk_peers >"$LOG" 2>&1; then
  head -40 "$LOG" >&2
  echo "build_topk_peers: nvcc failed (full log in $LOG)" >&2
  exit 1
fi
strip .devbin/topk_peers
xz -6 -T2 -f .devbin/topk_peers
echo "packed .devbin/topk_peers.xz ($(du -h .devbin/topk_peers.xz | cut -f1))"
