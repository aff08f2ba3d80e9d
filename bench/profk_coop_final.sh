#!/usr/bin/env bash
# GPU side of the local-state cooperative selection and the aggregated block selection, in one device
# call (< 10 min): the shared CUDA test bodies (selection, rows, statistics, graph capture), every
# selector against the CPU path, Nsight Compute durations of every Prof-K kernel of one call on the
# single rows, the flat selection and the masked rows, the target rows, then the single-row peers in
# the same call; with `rows`, also the row-wise shapes (f32) and their peers; `more` alone runs the
# stage table, the bf16 row-wise shapes and their peers.
# Runs from the repository root on the GPU machine with .devbin/pkrows/ (bench/profk_rows_pack.sh)
# and .devbin/topk_peers.xz (bench/build_topk_peers.sh) carried; everything goes to $OUT/r.txt.
#   bash bench/profk_coop_final.sh [rows|more]
MODE=${1:-full}
. bench/lib.sh
profk_begin bench/profk_coop_final.sh "$MODE"
if [ "$MODE" = more ]; then
  section "profk bench --device cuda --stages" 200 /tmp/b/profk bench --device cuda --stages
  section "profk bench --device cuda --row-shapes --dtype bf16" 150 /tmp/b/profk bench --device cuda --row-shapes --dtype bf16
  LIMIT=20 section "bench/topk_peers.sh bf16 rows" 200 bash bench/topk_peers.sh bf16 rows
  date -u >> "$R"
  exit 0
fi
profk_checks "$B"
date -u >> "$R"
kernels "2^24 (first calls)" 24 bench --device cuda --peers --only "2^24"
kernels "2^28" 24 bench --device cuda --peers --only "2^28"
kernels "2^30" 24 bench --device cuda --targets --only "2^30"
kernels "flat 8192x2^17" 24 bench --device cuda --targets --only "8192x2^17"
kernels "masked k=512" 8 bench --device cuda --row-shapes --only masked
date -u >> "$R"
section "profk bench --device cuda --targets" 120 /tmp/b/profk bench --device cuda --targets
LIMIT=20 section "bench/topk_peers.sh f32 single" 200 bash bench/topk_peers.sh f32 single
date -u >> "$R"
[ "$MODE" = rows ] || exit 0
section "profk bench --device cuda --row-shapes --dtype f32" 150 /tmp/b/profk bench --device cuda --row-shapes --dtype f32
LIMIT=20 section "bench/topk_peers.sh f32 rows" 200 bash bench/topk_peers.sh f32 rows
date -u >> "$R"
