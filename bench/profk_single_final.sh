#!/usr/bin/env bash
# GPU side of the single-row and flat shapes, in one device call of < 10 min, from the repository root
# with .devbin/pkrows (bench/profk_rows_pack.sh) and .devbin/topk_peers.xz (bench/build_topk_peers.sh)
# carried:
#   bash bench/profk_single_final.sh
# The shared CUDA test bodies (selection, rows, statistics, graph capture) and every selector against
# the CPU path; the stage table; the target rows; Nsight Compute's kernel durations of one call at 2^30
# and of the flat row; then the single-row and flat peers (FlashInfer, CUB DeviceTopK, torch.topk) in
# the same call.
. bench/lib.sh
profk_begin bench/profk_single_final.sh final
profk_checks "$B"
date -u >> "$R"
section "profk bench --device cuda --stages" 150 "$B/profk" bench --device cuda --stages
section "profk bench --device cuda --targets" 60 "$B/profk" bench --device cuda --targets
kernels "2^30" 12 bench --device cuda --peers --only "2^30"
kernels "flat 8192x2^17" 20 bench --device cuda --peers --only "flat"
date -u >> "$R"
LIMIT=20 section "bench/topk_peers.sh f32 single" 200 bash bench/topk_peers.sh f32 single
date -u >> "$R"
