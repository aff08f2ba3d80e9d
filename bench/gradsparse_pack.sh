#!/usr/bin/env bash
# Builds the CUDA binaries that bench/gradsparse_final.sh runs and packs them, stripped and xz'd, into
# .devbin/ef/ (run here, on the machine without a GPU, from the repository root):
#   bash bench/gradsparse_pack.sh
set -euo pipefail
. bench/pack.sh
# The accumulate tests, the gradsparse unit tests, the benchmark.
pack .devbin/ef "-p profk -p gradsparse --bins --tests" \
  profk/accumulate gradsparse/lib=gradsparse_lib gradsparse/finetune-bench
