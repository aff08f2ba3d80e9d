#!/usr/bin/env bash
# GPU side of one row's buffer selection read off the filter's histogram of its kept keys
# (kernels/select.cu `select_by_bins`) against the digits it replaces (PROFK_FILTER_BINS=0), in one
# device call of about 3 min, from the repository root with .devbin/pkrows (bench/profk_rows_pack.sh)
# carried:
#   bash bench/profk_filter_bins.sh
# The CUDA test bodies of the selection, the statistics and the accumulation, the graph capture test
# and every selector against the CPU path (the row kernels of kernels/rows.cu, untouched here, are
# left out), the selection tests and check again by the digits; then, by each setting in turn, the
# flat targets and the grid's flat rows (normal values, and few distinct values whose runs of equal
# keys span many tiles), Prof-K on the peers' single-row shapes, and Nsight Compute's kernels of one
# flat call.
# `short` (about 1 min): the selection tests and the check, then the flat targets and the grid's flat
# rows by each setting.
. bench/lib.sh
profk_begin bench/profk_filter_bins.sh "${1:-}"
# times SETTING...: the flat targets and the grid's flat rows by each setting, in turn.
times() {
  for setting in "$@"; do
    section "profk bench --device cuda --targets --only flat, $setting" 60 env $setting "$B/profk" bench --device cuda --targets --only flat
    section "profk bench --device cuda --only 'flat 8192', $setting" 90 env $setting "$B/profk" bench --device cuda --only "flat 8192"
  done
  date -u >> "$R"
}
if [ "${1:-}" = short ]; then
  section "test selection (cuda)" 90 "$B/selection" cuda
  section "profk bench --device cuda --check --no-table" 60 "$B/profk" bench --device cuda --check --no-table
  times "PROFK_FILTER_BINS=0" "PROFK_FILTER_BINS=1"
  exit 0
fi
for t in selection statistics accumulate; do section "test $t (cuda)" 150 "$B/$t" cuda; done
section "graph capture" 60 "$B/graph_capture"
section "profk bench --device cuda --check --no-table" 90 "$B/profk" bench --device cuda --check --no-table
section "test selection (cuda), PROFK_FILTER_BINS=0" 150 env PROFK_FILTER_BINS=0 "$B/selection" cuda
section "profk bench --device cuda --check --no-table, PROFK_FILTER_BINS=0" 90 env PROFK_FILTER_BINS=0 "$B/profk" bench --device cuda --check --no-table
times "PROFK_FILTER_BINS=0" "PROFK_FILTER_BINS=1" "PROFK_FILTER_BINS=0" "PROFK_FILTER_BINS=1"
for setting in "PROFK_FILTER_BINS=0" "PROFK_FILTER_BINS=1"; do
  section "profk bench --device cuda --peers, $setting" 90 env $setting "$B/profk" bench --device cuda --peers
  # kernels runs "$B/profk" itself: the setting goes through the environment.
  (export $setting; kernels "flat 8192x2^17, $setting" 24 bench --device cuda --peers --only "flat")
done
date -u >> "$R"
