#!/usr/bin/env bash
# GPU side of the selection's fixed costs in one device call (< 10 min): the shared CUDA test bodies
# (selection, rows, statistics, graph capture), every selector against the CPU path, the stage table,
# the target rows and the row-wise shapes (f32, bf16), then the peers in the same call
# (bench/topk_peers.sh f32 single, f32 rows, bf16 rows), Nsight Compute durations of the output and
# selection kernels, and one row's plan with samples of 2^16 and 2^18 (PROFK_GPU_SAMPLE_ONE). Runs from
# the repository root on the GPU machine with .devbin/pkrows/ (bench/profk_rows_pack.sh) and
# .devbin/topk_peers.xz (bench/build_topk_peers.sh) carried; everything goes to $OUT/r.txt.
R=${OUT:-/tmp/out}/r.txt
. bench/lib.sh
unpack .devbin/pkrows /tmp/b
mkdir -p .devbin/pk && cp .devbin/pkrows/profk.xz .devbin/pk/
{ echo "# H200 device call: bench/profk_launches_final.sh"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; } > "$R"
for t in selection rows statistics; do
  echo "## test $t (cuda)" >> "$R"; timeout 120 /tmp/b/$t cuda 2>&1 | grep -E "^test |test result|panicked|Error" >> "$R"
done
echo "## graph capture" >> "$R"; timeout 60 /tmp/b/graph_capture 2>&1 | grep -E "^test |test result|panicked" >> "$R"
echo "## profk bench --device cuda --check --no-table" >> "$R"; timeout 90 /tmp/b/profk bench --device cuda --check --no-table 2>&1 | tail -1 >> "$R"
echo "## profk bench --device cuda --stages" >> "$R"; timeout 200 /tmp/b/profk bench --device cuda --stages 2>/dev/null | grep '^|' >> "$R"
echo "## profk bench --device cuda --targets" >> "$R"; timeout 120 /tmp/b/profk bench --device cuda --targets 2>/dev/null | grep '^|' >> "$R"
for d in f32 bf16; do echo "## profk bench --device cuda --row-shapes --dtype $d" >> "$R"; timeout 150 /tmp/b/profk bench --device cuda --row-shapes --dtype $d 2>/dev/null | grep '^|' >> "$R"; done
date -u >> "$R"
for g in "f32 single" "f32 rows" "bf16 rows"; do echo "## bench/topk_peers.sh $g" >> "$R"; bash bench/topk_peers.sh $g 2>&1 | grep -E '^(\||#)' >> "$R"; done
date -u >> "$R"
echo "## ncu rank 2^24" >> "$R"
timeout 120 ncu --clock-control none -k regex:"rank_gather|out_gather|select_all" --metrics gpu__time_duration.sum --csv -c 12 /tmp/b/profk bench --device cuda --row-shapes --only "2^24" 2>/dev/null | grep -E "rank_gather|out_gather|select_all" | cut -d, -f5,11-16 >> "$R"
echo "## ncu 2^30" >> "$R"
timeout 120 ncu --clock-control none -k regex:"rank_gather|select_all|filter|block_kth|draw" --metrics gpu__time_duration.sum --csv -c 16 /tmp/b/profk bench --device cuda --targets 2>/dev/null | grep -E "gpu__time" | cut -d, -f5,11-16 >> "$R"
date -u >> "$R"
for S in 65536 262144; do
  echo "## S=$S stages" >> "$R"; PROFK_GPU_SAMPLE_ONE=$S timeout 200 /tmp/b/profk bench --device cuda --stages 2>/dev/null | grep '^|' | grep -E "2\^28|2\^30|flat" >> "$R"
  echo "## S=$S targets" >> "$R"; PROFK_GPU_SAMPLE_ONE=$S timeout 120 /tmp/b/profk bench --device cuda --targets 2>/dev/null | grep '^|' >> "$R"
done
date -u >> "$R"
