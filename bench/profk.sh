#!/usr/bin/env bash
# Prof-K on the GPU in one device call of < 10 min, from the repository root with .devbin/profk
# (bash bench/pack.sh profk) and .devbin/topk_peers.xz (bash bench/peers/build_topk_peers.sh) carried;
# everything goes to $OUT/r.txt:
#   bash bench/profk.sh [single|rows]
# Both: the shared CUDA test bodies (selection, rows, statistics, accumulate, graph capture) and every
# CUDA selector against the CPU path (`profk bench --check`).
# single (default): the stage table, the target rows, Nsight Compute's kernel durations of one call at
#   2^24, 2^28, 2^30 and of the flat row, then the single-row and flat peers (FlashInfer, CUB
#   DeviceTopK, torch.topk) in the same call.
# rows: the row-wise shapes (1024x2^18, 128x2^20, masked 8192x32768) in f32, bf16 and f16, each
#   beside its peers in the same call.
. bench/lib.sh
MODE=${1:-single}
case $MODE in single | rows) ;; *) echo "usage: bench/profk.sh [single|rows]" >&2; exit 2 ;; esac
profk_begin bench/profk.sh "$MODE"
profk_checks "$B"
date -u >> "$R"
if [ "$MODE" = rows ]; then
  for dtype in f32 bf16 f16; do
    LIMIT=20 section "bench/peers/topk_peers.sh $dtype rows" 200 bash bench/peers/topk_peers.sh $dtype rows
  done
  date -u >> "$R"
  exit 0
fi
section "profk bench --device cuda --stages" 150 "$B/profk" bench --device cuda --stages
section "profk bench --device cuda --targets" 60 "$B/profk" bench --device cuda --targets
for shape in "2^24" "2^28" "2^30"; do kernels "$shape" 12 bench --device cuda --peers --only "$shape"; done
kernels "flat 8192x2^17" 20 bench --device cuda --peers --only "flat"
date -u >> "$R"
LIMIT=20 section "bench/peers/topk_peers.sh f32 single" 200 bash bench/peers/topk_peers.sh f32 single
date -u >> "$R"
