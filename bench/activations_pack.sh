#!/usr/bin/env bash
# Builds and packs, stripped and xz'd, the CUDA builds that bench/activations_final.sh and
# bench/activations_gpu.sh run into .devbin/act/ (git-ignored). Run from the repo root:
#   bash bench/activations_pack.sh
set -euo pipefail
. bench/pack.sh
pack .devbin/act "-p activations --bins --tests --examples" \
  activations/extract activations/forward_bench activations/ops activations/gpt2 activations/shards
