#!/usr/bin/env bash
# Builds what bench/profk_rows_final.sh runs (profk's CUDA tests, the row-kernel, accumulation and
# graph-capture tests among them, and the profk CLI) and packs them, stripped and xz'd, into .devbin/pkrows/ (run here, on the machine
# without a GPU, from the repository root):
#   bash bench/profk_rows_pack.sh
set -euo pipefail
. bench/pack.sh
# Named test targets: profk's params test reads the profk binary, which lives in the root package.
pack .devbin/pkrows "-p profk --test selection --test rows --test statistics --test accumulate --test graph_capture" \
  profk/selection profk/rows profk/statistics profk/accumulate profk/graph_capture
pack .devbin/pkrows "-p sparsetrain --bin profk" sparsetrain/profk
