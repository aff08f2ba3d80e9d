#!/usr/bin/env bash
# Builds and packs, stripped and xz'd, the CUDA builds that bench/activations_final.sh runs into
# .devbin/act/ (git-ignored). Run from the repo root:
#   bash bench/activations_pack.sh
set -euo pipefail
. bench/pack.sh
pack .devbin/act "-p gpt2 -p activations --bins --tests --examples" \
  activations/extract activations/forward_bench gpt2/ops gpt2/gpt2 activations/shards
