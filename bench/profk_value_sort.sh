#!/usr/bin/env bash
# GPU side of one row's value order by key alone (kernels/select.cu `tie_runs`, then `tie_out`, which
# places the long runs of equal keys as it writes the output) against the whole composite's sort
# (PROFK_VALUE_SORT=whole), in one device call of < 10 min, from the repository root with
# .devbin/pkrows (bench/profk_rows_pack.sh) carried:
#   bash bench/profk_value_sort.sh
# The shared CUDA test bodies and every selector against the CPU path; then, by each setting, the flat
# targets, the grid's flat rows (normal values, and few distinct values whose runs of equal keys span
# many tiles) and the single rows of 2^20 at k = 2^16 and 2^19; Nsight Compute's kernels of one flat
# call by each.
. bench/lib.sh
profk_begin bench/profk_value_sort.sh ""
profk_checks "$B"
date -u >> "$R"
for setting in key whole; do
  unset PROFK_VALUE_SORT
  [ "$setting" = whole ] && export PROFK_VALUE_SORT=whole
  section "profk bench --device cuda --targets --only flat, $setting" 60 "$B/profk" bench --device cuda --targets --only flat
  section "profk bench --device cuda --only 'flat 8192', $setting" 90 "$B/profk" bench --device cuda --only "flat 8192"
  section "profk bench --device cuda --only 2^20, $setting" 60 "$B/profk" bench --device cuda --only "2^20"
  kernels "flat 8192x2^17, $setting" 24 bench --device cuda --peers --only "flat"
  date -u >> "$R"
done
unset PROFK_VALUE_SORT
