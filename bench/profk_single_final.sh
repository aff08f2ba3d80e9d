#!/usr/bin/env bash
# GPU side of the single-row and flat shapes, in one device call of < 10 min, from the repository root
# with .devbin/pkrows (bench/profk_rows_pack.sh) and .devbin/topk_peers.xz (bench/build_topk_peers.sh)
# carried:
#   bash bench/profk_single_final.sh [final|sample]
# The shared CUDA test bodies (selection, rows, statistics, graph capture) and every selector against
# the CPU path; the stage table; the target rows; Nsight Compute's kernel durations of one call at 2^30
# and of the flat row; then the single-row and flat peers (FlashInfer, CUB DeviceTopK, torch.topk) in
# the same call; Nsight Compute also at 2^24 and 2^28; the target rows, and Nsight Compute at 2^24 and
# 2^30, also with the buffer's selection and the ranked output instead of the sorted lists
# (PROFK_RANK_LIST=0). `sample` leaves the row-wise stages and the peers out, and adds Nsight Compute's
# durations of the sample's threshold at 2^24, 2^28 and 2^30 by each path (PROFK_SAMPLE=spread|block).
. bench/lib.sh
MODE=${1:-final}
profk_begin bench/profk_single_final.sh "$MODE"
profk_checks "$B"
date -u >> "$R"
if [ "$MODE" = sample ]; then
  for only in "2^2" "2^30" "flat 8"; do
    section "profk bench --device cuda --stages --only $only" 90 "$B/profk" bench --device cuda --stages --only "$only"
  done
else
  section "profk bench --device cuda --stages" 150 "$B/profk" bench --device cuda --stages
fi
section "profk bench --device cuda --targets" 60 "$B/profk" bench --device cuda --targets
kernels "2^30" 12 bench --device cuda --peers --only "2^30"
if [ "$MODE" = final ]; then
  for shape in "2^24" "2^28"; do kernels "$shape" 12 bench --device cuda --peers --only "$shape"; done
  # The buffer's selection and the ranking of its outputs that the sorted lists replace.
  export PROFK_RANK_LIST=0
  section "profk bench --device cuda --targets, PROFK_RANK_LIST=0" 60 "$B/profk" bench --device cuda --targets
  for shape in "2^24" "2^30"; do kernels "$shape, PROFK_RANK_LIST=0" 12 bench --device cuda --peers --only "$shape"; done
  unset PROFK_RANK_LIST
fi
kernels "flat 8192x2^17" 20 bench --device cuda --peers --only "flat"
if [ "$MODE" = sample ]; then
  for path in spread block; do
    export PROFK_SAMPLE=$path
    for shape in "2^24" "2^28" "2^30"; do kernels "$shape, PROFK_SAMPLE=$path" 6 bench --device cuda --peers --only "$shape"; done
  done
  unset PROFK_SAMPLE
  export PROFK_SPREAD_PER=4
  kernels "2^30, PROFK_SPREAD_PER=4" 6 bench --device cuda --peers --only "2^30"
  unset PROFK_SPREAD_PER
  date -u >> "$R"
  exit 0
fi
date -u >> "$R"
LIMIT=20 section "bench/topk_peers.sh f32 single" 200 bash bench/topk_peers.sh f32 single
date -u >> "$R"
