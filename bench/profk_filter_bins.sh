#!/usr/bin/env bash
# GPU side of two switches on one row's buffer selection and output, in one device call of < 10 min,
# from the repository root with .devbin/pkrows (bench/profk_rows_pack.sh) carried:
#   bash bench/profk_filter_bins.sh
# - PROFK_FILTER_BINS=1: the filter counts the kept keys by bin, and the buffer's selection takes the
#   bins above the k-th largest's in one pass (kernels/select.cu `select_by_bins`);
# - PROFK_TIE_OUT=1: one row's value order by key alone places its long runs of equal keys as it
#   writes the output (`tie_out`).
# The shared CUDA test bodies and every selector against the CPU path, then the selection tests and
# the check with each switch and both; then, by setting, the flat and single-row targets, the grid's
# flat rows (normal values, and few distinct values whose runs of equal keys span many tiles) and the
# rows of 2^20, the whole composite's sort for reference; Nsight Compute's kernels of one flat call.
. bench/lib.sh
profk_begin bench/profk_filter_bins.sh ""
profk_checks "$B"
for on in "PROFK_FILTER_BINS=1" "PROFK_TIE_OUT=1" "PROFK_FILTER_BINS=1 PROFK_TIE_OUT=1"; do
  section "test selection (cuda), $on" 150 env $on "$B/selection" cuda
  section "profk bench --device cuda --check --no-table, $on" 90 env $on "$B/profk" bench --device cuda --check --no-table
done
date -u >> "$R"
for setting in "PROFK_FILTER_BINS=0" "PROFK_FILTER_BINS=1" "PROFK_TIE_OUT=1" "PROFK_FILTER_BINS=1 PROFK_TIE_OUT=1" \
  "PROFK_VALUE_SORT=whole"; do
  section "profk bench --device cuda --targets --only flat, $setting" 60 env $setting "$B/profk" bench --device cuda --targets --only flat
  section "profk bench --device cuda --targets --only 2^2, $setting" 60 env $setting "$B/profk" bench --device cuda --targets --only "2^2"
  section "profk bench --device cuda --only 'flat 8192', $setting" 90 env $setting "$B/profk" bench --device cuda --only "flat 8192"
  section "profk bench --device cuda --only 2^20, $setting" 60 env $setting "$B/profk" bench --device cuda --only "2^20"
  date -u >> "$R"
done
for setting in "PROFK_FILTER_BINS=0" "PROFK_FILTER_BINS=1" "PROFK_FILTER_BINS=1 PROFK_TIE_OUT=1"; do
  # kernels runs "$B/profk" itself: the setting goes through the environment.
  (export $setting; kernels "flat 8192x2^17, $setting" 24 bench --device cuda --peers --only "flat")
done
date -u >> "$R"
