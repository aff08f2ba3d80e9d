#!/usr/bin/env bash
# GPU side of two switches on one row's buffer selection and output, in one device call of about
# 4 min, from the repository root with .devbin/pkrows (bench/profk_rows_pack.sh) carried:
#   bash bench/profk_filter_bins.sh
# - PROFK_FILTER_BINS=1: the filter counts the kept keys by bin, and the buffer's selection takes the
#   bins above the k-th largest's in one pass (kernels/select.cu `select_by_bins`);
# - PROFK_TIE_OUT=1: one row's value order by key alone places its long runs of equal keys as it
#   writes the output (`tie_out`).
# The CUDA test bodies of the selection, the statistics and the accumulation, the graph capture test
# and every selector against the CPU path (the row kernels of kernels/rows.cu, untouched by either
# switch, are left out); then each switch's selection tests and check, each followed by its timings
# beside the default: the flat targets and the grid's flat rows (normal values, and few distinct
# values whose runs of equal keys span many tiles), the single-row targets, and Nsight Compute's
# kernels of one flat call.
# `short` (about 2 min): the selection tests and the check with both switches on, the check by the
# default, then the flat targets by the default, each switch and both, and the grid's flat rows by the
# default and both.
. bench/lib.sh
profk_begin bench/profk_filter_bins.sh "${1:-}"
if [ "${1:-}" = short ]; then
  both="PROFK_FILTER_BINS=1 PROFK_TIE_OUT=1"
  section "test selection (cuda), $both" 90 env $both "$B/selection" cuda
  section "profk bench --device cuda --check --no-table, $both" 60 env $both "$B/profk" bench --device cuda --check --no-table
  section "profk bench --device cuda --check --no-table" 60 "$B/profk" bench --device cuda --check --no-table
  date -u >> "$R"
  for setting in "PROFK_FILTER_BINS=0" "PROFK_FILTER_BINS=1" "PROFK_TIE_OUT=1" "$both"; do
    section "profk bench --device cuda --targets --only flat, $setting" 40 env $setting "$B/profk" bench --device cuda --targets --only flat
  done
  for setting in "PROFK_FILTER_BINS=0" "$both"; do
    section "profk bench --device cuda --only 'flat 8192', $setting" 60 env $setting "$B/profk" bench --device cuda --only "flat 8192"
  done
  date -u >> "$R"
  exit 0
fi
for t in selection statistics accumulate; do section "test $t (cuda)" 150 "$B/$t" cuda; done
section "graph capture" 60 "$B/graph_capture"
section "profk bench --device cuda --check --no-table" 90 "$B/profk" bench --device cuda --check --no-table
# times SETTING...: the flat targets and the grid's flat rows by each setting, in turn.
times() {
  for setting in "$@"; do
    section "profk bench --device cuda --targets --only flat, $setting" 60 env $setting "$B/profk" bench --device cuda --targets --only flat
    section "profk bench --device cuda --only 'flat 8192', $setting" 90 env $setting "$B/profk" bench --device cuda --only "flat 8192"
  done
  date -u >> "$R"
}
for on in "PROFK_FILTER_BINS=1" "PROFK_TIE_OUT=1" "PROFK_FILTER_BINS=1 PROFK_TIE_OUT=1"; do
  section "test selection (cuda), $on" 150 env $on "$B/selection" cuda
  section "profk bench --device cuda --check --no-table, $on" 90 env $on "$B/profk" bench --device cuda --check --no-table
  times "PROFK_FILTER_BINS=0" "$on"
done
for setting in "PROFK_FILTER_BINS=0" "PROFK_FILTER_BINS=1"; do
  section "profk bench --device cuda --targets --only 2^2, $setting" 60 env $setting "$B/profk" bench --device cuda --targets --only "2^2"
  # kernels runs "$B/profk" itself: the setting goes through the environment.
  (export $setting; kernels "flat 8192x2^17, $setting" 24 bench --device cuda --peers --only "flat")
done
date -u >> "$R"
