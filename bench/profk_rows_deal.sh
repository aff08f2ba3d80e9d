#!/usr/bin/env bash
# GPU side of the row kernel's rows dealt from the call's counter and its failed guesses recovered in
# one read (kernels/rows.cu `rows_topk`), against the build before them (.devbin/old/profk.xz) and
# against rows in a fixed order (PROFK_ROWS_DEAL=0), in one device call of about 5 min, from the
# repository root with .devbin/pkrows (bench/profk_rows_pack.sh) and .devbin/old carried:
#   bash bench/profk_rows_deal.sh
# The CUDA tests and every selector against the CPU path; then Prof-K on the batched and masked rows
# by each build and setting in turn, two rounds, in f32, bf16 and f16; Nsight Compute's duration and
# SM activity (least, mean, most) of the row kernel at 1024x2^18, k = 64 and 1024, by each. Add
# .devbin/topk_peers.xz and run `LIMIT=20 bash bench/topk_peers.sh f32 rows` after it for the peers.
. bench/lib.sh
profk_begin bench/profk_rows_deal.sh "${1:-}"
profk_checks "$B"
unpack .devbin/old /tmp/old
date -u >> "$R"
for round in 1 2; do
  for dtype in f32 bf16 f16; do
    for run in "/tmp/old/profk" "$B/profk PROFK_ROWS_DEAL=0" "$B/profk"; do
      set -- $run
      for only in 1024x masked; do
        section "profk bench --device cuda --peers --dtype $dtype --only $only, $run (round $round)" 60 \
          env ${2:-PROFK_NONE=1} "$1" bench --device cuda --peers --dtype "$dtype" --only "$only"
      done
    done
  done
done
python3 bench/rows_inputs.py /tmp
for k in 64 1024; do
  for run in "/tmp/old/profk" "$B/profk PROFK_ROWS_DEAL=0" "$B/profk"; do
    set -- $run
    echo "## ncu 1024x2^18 k = $k, $run" >> "$R"
    env ${2:-PROFK_NONE=1} timeout 120 ncu --clock-control none -k regex:rows_ -c 1 \
      --metrics gpu__time_duration.sum,sm__cycles_active.avg,sm__cycles_active.min,sm__cycles_active.max \
      "$1" select --device cuda --k $k --input /tmp/rows-F32.st --tensor x --output /tmp/o.st 2>&1 |
      grep -E "duration|cycles" >> "$R"
  done
done
date -u >> "$R"
