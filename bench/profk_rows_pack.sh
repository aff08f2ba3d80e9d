#!/usr/bin/env bash
# Builds what bench/profk_rows_final.sh runs (profk's CUDA tests, the row-kernel tests among them, and
# the profk CLI) and packs them, stripped and xz'd, into .devbin/pkrows/ (run here, on the machine
# without a GPU, from the repository root):
#   bash bench/profk_rows_pack.sh
set -euo pipefail
. bench/pack.sh
pack .devbin/pkrows "-p sparsetrain -p profk --bins --tests" \
  profk/selection profk/rows profk/statistics sparsetrain/profk
