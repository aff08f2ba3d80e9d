#!/usr/bin/env bash
# GPU side of the value order's sort by key alone (kernels/select.cu `tie_runs`, `tie_merge`) against
# the whole composite's sort (PROFK_VALUE_SORT=whole), in one device call of < 10 min, from the
# repository root with .devbin/pkrows (bench/profk_rows_pack.sh) carried:
#   bash bench/profk_value_sort.sh
# The shared CUDA test bodies and every selector against the CPU path; then, by each sort, the flat
# targets, the grid's flat rows (normal values, and few distinct values whose runs of equal keys span
# many tiles) and the single rows of 2^20 at k = 2^16 and 2^19; Nsight Compute's kernels of one flat
# call by each.
. bench/lib.sh
profk_begin bench/profk_value_sort.sh ""
profk_checks "$B"
date -u >> "$R"
for sort in key whole; do
  if [ $sort = whole ]; then export PROFK_VALUE_SORT=whole; fi
  section "profk bench --device cuda --targets --only flat, sort by $sort" 60 "$B/profk" bench --device cuda --targets --only flat
  section "profk bench --device cuda --only 'flat 8192', sort by $sort" 90 "$B/profk" bench --device cuda --only "flat 8192"
  section "profk bench --device cuda --only 2^20, sort by $sort" 60 "$B/profk" bench --device cuda --only "2^20"
  kernels "flat 8192x2^17, sort by $sort" 24 bench --device cuda --peers --only "flat"
  date -u >> "$R"
done
unset PROFK_VALUE_SORT
