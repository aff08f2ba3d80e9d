#!/usr/bin/env bash
# Builds the CUDA binaries that bench/profk_final.sh runs and packs them, stripped and xz'd, into
# .devbin/pk/ (run here, on the machine without a GPU, from the repository root):
#   bash bench/profk_pack.sh
set -euo pipefail
. bench/pack.sh
# profk's CUDA tests, the profk CLI, the error-feedback benchmark.
pack .devbin/pk "-p sparsetrain -p profk -p gradsparse --bins --tests" \
  profk/selection profk/accumulate profk/statistics sparsetrain/profk gradsparse/finetune-bench
