#!/usr/bin/env bash
# GPU side of the one-block-per-row kernel in one device call (< 3 min): the shared CUDA test bodies
# (selection, rows, statistics, graph capture), the CUDA-vs-CPU check of every selector, then the
# issue's row-wise shapes (1024x2^18, 128x2^20, masked 8192x32768) in f32 and bf16, both orders, by the
# default path, the row kernel and the sampled path; f32 once more with two row-kernel blocks per SM
# instead of four. Runs from the repository root on the GPU machine with the builds of
# bench/profk_rows_pack.sh in .devbin/pkrows/. Logs go to $OUT/profk-rows/.
set -uo pipefail
. bench/lib.sh
begin profk-rows .devbin/pkrows
step "profk selection tests (cuda)" 60 selection "$B/selection" cuda
step "profk row-kernel tests (cuda)" 60 rows "$B/rows" cuda
step "profk statistics test (cuda)" 20 statistics "$B/statistics" cuda
step "profk graph-capture test (cuda)" 60 graph "$B/graph_capture"
step "CUDA vs CPU, every selector" 60 check "$B/profk" bench --device cuda --check --no-table
step "row-wise shapes, f32" 40 rows-f32 "$B/profk" bench --device cuda --row-shapes --dtype f32
step "row-wise shapes, bf16" 40 rows-bf16 "$B/profk" bench --device cuda --row-shapes --dtype bf16
PROFK_ROWS_PER_SM=2 step "row-wise shapes, f32, 2 blocks/SM" 40 rows-f32-2 "$B/profk" bench --device cuda --row-shapes --dtype f32

echo "## Prof-K row kernel on $GPU ($(date -u +%F\ %H:%M) UTC), total $((SECONDS - START)) s"
echo "| run | result | time | tests |"
echo "|---|---|---|---|"
printf '%s\n' "${SUMMARY[@]}"
for d in f32 bf16 f32-2; do
  echo
  echo "### Row-wise shapes, $d, CUDA-event medians (ms); floor = one read at 4.41 TB/s"
  grep -h '^|' "$LOG/rows-$d.log" || tail -3 "$LOG/rows-$d.log"
done
