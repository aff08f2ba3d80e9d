#!/usr/bin/env bash
# GPU side of the row kernel's key guess and its output without reads of the row, in one device call
# of < 10 min, from the repository root with .devbin/pkrows (bench/profk_rows_pack.sh), the profk CLI
# built before the change in .devbin/pkrows-a (the A of the A/B) and .devbin/topk_peers.xz
# (bench/build_topk_peers.sh) carried:
#   bash bench/profk_guess_final.sh [final|rows]
# final (default): the shared CUDA test bodies (selection, rows, statistics, graph capture) and every
#   selector against the CPU path; the row kernel's shapes (masked, 1024x2^18; f32 and bf16) as built
#   and by the binary before the change (f32), the masked rows without the output writes
#   (PROFK_ROWS_OUTPUT=none); the target rows; then the peers in the same call (f32 and bf16 row-wise
#   shapes, f32 single rows);
# rows: the same with the `rows` test body alone and `--check`, without `--targets` and the single
#   rows' peers (a change to the row kernel only).
MODE=${1:-final}
. bench/lib.sh
profk_begin bench/profk_guess_final.sh "$MODE"
unpack .devbin/pkrows-a /tmp/a
if [ "$MODE" = final ]; then
  profk_checks "$B"
else
  section "test rows (cuda)" 150 "$B/rows" cuda
  section "profk bench --device cuda --check --no-table" 90 "$B/profk" bench --device cuda --check --no-table
fi
date -u >> "$R"
for dt in f32 bf16; do
  for only in 8192x32768 1024x2^18; do
    section "profk bench --device cuda --row-shapes --dtype $dt --only $only" 60 "$B/profk" bench --device cuda --row-shapes --dtype $dt --only $only
  done
done
for only in 8192x32768 1024x2^18; do
  section "before the change: profk bench --device cuda --row-shapes --dtype f32 --only $only" 60 /tmp/a/profk bench --device cuda --row-shapes --dtype f32 --only $only
done
section "PROFK_ROWS_OUTPUT=none: profk bench --device cuda --row-shapes --dtype f32 --only 8192x32768" 60 env PROFK_ROWS_OUTPUT=none "$B/profk" bench --device cuda --row-shapes --dtype f32 --only 8192x32768
[ "$MODE" = final ] && section "profk bench --device cuda --targets" 60 "$B/profk" bench --device cuda --targets
date -u >> "$R"
LIMIT=20 section "bench/topk_peers.sh f32 rows" 200 bash bench/topk_peers.sh f32 rows
LIMIT=20 section "bench/topk_peers.sh bf16 rows" 200 bash bench/topk_peers.sh bf16 rows
[ "$MODE" = final ] && LIMIT=20 section "bench/topk_peers.sh f32 single" 200 bash bench/topk_peers.sh f32 single
date -u >> "$R"
