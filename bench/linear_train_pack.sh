#!/usr/bin/env bash
# Builds and packs, stripped and xz'd, the CUDA builds that bench/linear_train_final.sh runs into
# .devbin/lin/ (git-ignored): the train_linear and ops test binaries and the linear_train_bench
# example. Run from the repo root (seconds when up to date):
#   bash bench/linear_train_pack.sh
set -euo pipefail
. bench/pack.sh
pack .devbin/lin "-p gpt2 -p activations --tests --examples" \
  gpt2/ops gpt2/train_linear activations/linear_train_bench
