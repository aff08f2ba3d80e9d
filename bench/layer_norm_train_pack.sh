#!/usr/bin/env bash
# Builds and packs, stripped and xz'd, the CUDA builds that bench/layer_norm_train_final.sh runs into
# .devbin/ln/ (git-ignored). Run from the repo root:
#   bash bench/layer_norm_train_pack.sh
set -euo pipefail
. bench/pack.sh
pack .devbin/ln "-p gpt2 -p activations --test train_layer_norm --example layer_norm_train_bench" \
  gpt2/train_layer_norm activations/layer_norm_train_bench
