#!/usr/bin/env bash
# GPU side of the selection's fixed costs in one device call: the shared CUDA test bodies (selection,
# rows, statistics, graph capture) and every selector against the CPU path, then
#   (no argument, < 10 min) the stage table, the target rows and the row-wise shapes (f32, bf16), the
#     peers in the same call (bench/topk_peers.sh f32 single, f32 rows, bf16 rows), Nsight Compute
#     durations of every Prof-K kernel of one call, and one row's plan with samples of 2^16 and 2^18
#     (PROFK_GPU_SAMPLE_ONE);
#   (short, < 2 min, after a routing change) the target rows, the single-row shapes by every path and
#     the single-row peers with a 10 s limit a case (CUB's 2^30 and flat cases exceed it and read
#     "hangs": take CUB from the full run).
# Runs from the repository root on the GPU machine with .devbin/pkrows/ (bench/profk_rows_pack.sh) and
# .devbin/topk_peers.xz (bench/build_topk_peers.sh) carried; everything goes to $OUT/r.txt.
#   bash bench/profk_launches_final.sh [short]
MODE=${1:-full}
. bench/lib.sh
profk_begin bench/profk_launches_final.sh "$MODE"
for t in selection rows statistics; do section "test $t (cuda)" 120 /tmp/b/$t cuda; done
section "graph capture" 60 /tmp/b/graph_capture
section "profk bench --device cuda --check --no-table" 90 /tmp/b/profk bench --device cuda --check --no-table
if [ "$MODE" = short ]; then
  section "profk bench --device cuda --targets" 40 /tmp/b/profk bench --device cuda --targets
  section "profk bench --device cuda --row-shapes --only 2^2" 40 /tmp/b/profk bench --device cuda --row-shapes --only "2^2"
  LIMIT=10 section "bench/topk_peers.sh f32 single" 100 bash bench/topk_peers.sh f32 single
  date -u >> "$R"
  exit 0
fi
section "profk bench --device cuda --stages" 200 /tmp/b/profk bench --device cuda --stages
section "profk bench --device cuda --targets" 120 /tmp/b/profk bench --device cuda --targets
for d in f32 bf16; do
  section "profk bench --device cuda --row-shapes --dtype $d" 150 /tmp/b/profk bench --device cuda --row-shapes --dtype $d
done
date -u >> "$R"
for g in "f32 single" "f32 rows" "bf16 rows"; do section "bench/topk_peers.sh $g" 300 bash bench/topk_peers.sh $g; done
date -u >> "$R"
kernels "2^24" 12 bench --device cuda --row-shapes --only "2^24"
kernels "2^30" 16 bench --device cuda --targets
date -u >> "$R"
for S in 65536 262144; do
  PROFK_GPU_SAMPLE_ONE=$S section "S=$S stages" 200 /tmp/b/profk bench --device cuda --stages
  PROFK_GPU_SAMPLE_ONE=$S section "S=$S targets" 120 /tmp/b/profk bench --device cuda --targets
done
date -u >> "$R"
