#!/usr/bin/env bash
# GPU side of the overlapped launches and the kept pool memory, in device calls of < 10 min each:
#   ab (default): the shared CUDA test bodies (selection, rows, statistics, graph capture), every
#     selector against the CPU path, then the target rows and Prof-K on the peers' shapes three times:
#     as built, with PROFK_NO_DEPENDENT_LAUNCH=1 (every launch waits for the kernel before it) and with
#     PROFK_POOL_RELEASE=1 (the pool hands freed memory back at each synchronization, its default),
#     then the stage table with the queued row (the device's own time);
#   rows: the selection and rows test bodies, then the row kernel's shapes (masked, 1024x2^18; f32 and
#     bf16), and the masked rows without the output writes (PROFK_ROWS_OUTPUT=none);
#   final: the test bodies, the masked rows with and without the output writes, the targets, the stage
#     table, then the peers in the same call (f32 single rows, f32 and bf16 row-wise shapes);
#   peers: the peers in the same call (bench/topk_peers.sh f32 single, f32 rows), the f32 and bf16
#     row-wise shapes and the bf16 peers.
# Runs from the repository root on the GPU machine with .devbin/pkrows/ (bench/profk_rows_pack.sh) and
# .devbin/topk_peers.xz (bench/build_topk_peers.sh) carried; everything goes to $OUT/r.txt.
#   bash bench/profk_dependent_final.sh [ab|rows|final|peers]
MODE=${1:-ab}
. bench/lib.sh
profk_begin bench/profk_dependent_final.sh "$MODE"
if [ "$MODE" = final ]; then
  profk_checks "$B"
  for dt in f32 bf16; do
    section "profk bench --device cuda --row-shapes --dtype $dt --only 8192x32768" 60 /tmp/b/profk bench --device cuda --row-shapes --dtype $dt --only 8192x32768
    section "PROFK_ROWS_OUTPUT=none: profk bench --device cuda --row-shapes --dtype $dt --only 8192x32768" 60 env PROFK_ROWS_OUTPUT=none /tmp/b/profk bench --device cuda --row-shapes --dtype $dt --only 8192x32768
  done
  section "profk bench --device cuda --targets" 60 /tmp/b/profk bench --device cuda --targets
  section "profk bench --device cuda --stages" 200 /tmp/b/profk bench --device cuda --stages
  date -u >> "$R"
  LIMIT=20 section "bench/topk_peers.sh f32 single" 200 bash bench/topk_peers.sh f32 single
  LIMIT=20 section "bench/topk_peers.sh f32 rows" 200 bash bench/topk_peers.sh f32 rows
  LIMIT=20 section "bench/topk_peers.sh bf16 rows" 200 bash bench/topk_peers.sh bf16 rows
  date -u >> "$R"
  exit 0
fi
if [ "$MODE" = rows ]; then
  for t in selection rows; do section "test $t (cuda)" 150 /tmp/b/$t cuda; done
  for dt in f32 bf16; do
    for only in 8192x32768 1024x2^18; do
      section "profk bench --device cuda --row-shapes --dtype $dt --only $only" 60 /tmp/b/profk bench --device cuda --row-shapes --dtype $dt --only $only
    done
    section "PROFK_ROWS_OUTPUT=none: profk bench --device cuda --row-shapes --dtype $dt --only 8192x32768" 60 env PROFK_ROWS_OUTPUT=none /tmp/b/profk bench --device cuda --row-shapes --dtype $dt --only 8192x32768
  done
  date -u >> "$R"
  exit 0
fi
if [ "$MODE" = peers ]; then
  LIMIT=20 section "bench/topk_peers.sh f32 single" 200 bash bench/topk_peers.sh f32 single
  LIMIT=20 section "bench/topk_peers.sh f32 rows" 200 bash bench/topk_peers.sh f32 rows
  section "profk bench --device cuda --row-shapes --dtype bf16" 150 /tmp/b/profk bench --device cuda --row-shapes --dtype bf16
  LIMIT=20 section "bench/topk_peers.sh bf16 rows" 200 bash bench/topk_peers.sh bf16 rows
  date -u >> "$R"
  exit 0
fi
profk_checks "$B"
date -u >> "$R"
for v in "" PROFK_NO_DEPENDENT_LAUNCH=1 PROFK_POOL_RELEASE=1; do
  section "${v:-as built}: profk bench --device cuda --targets" 60 env $v /tmp/b/profk bench --device cuda --targets
  section "${v:-as built}: profk bench --device cuda --peers --dtype f32" 90 env $v /tmp/b/profk bench --device cuda --peers --dtype f32
done
date -u >> "$R"
section "profk bench --device cuda --stages" 200 /tmp/b/profk bench --device cuda --stages
date -u >> "$R"
