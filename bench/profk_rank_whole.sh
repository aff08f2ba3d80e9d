#!/usr/bin/env bash
# GPU side of one row's sorted outputs read off its whole list by every block (kernels/rank_list.cuh
# `rank_whole`, a plain launch) against the count and scatter over the grid it replaces
# (PROFK_RANK_WHOLE=0), and of one attempt for one row where the dense fallback costs less than the
# redraw's launches (work_split::device_attempts) against two (PROFK_ATTEMPTS=2). One device call of
# about 2.5 min, from the repository root with .devbin/pkrows (bench/profk_rows_pack.sh) carried:
#   bash bench/profk_rank_whole.sh
# The CUDA tests and every selector against the CPU path on the new defaults, the selection tests
# and the check again with the whole-list ranking on every shape it may serve (PROFK_RANK_WHOLE=1)
# and off; then Prof-K on the single-row peer shapes by four settings in two rounds, the stage table
# of 2^24 and 2^28, and Nsight Compute's kernels of one call at 2^24 and 2^28 by the old and new
# defaults; then the flat targets. Add .devbin/topk_peers.xz and run
# `LIMIT=10 bash bench/topk_peers.sh f32 single` after it for the peers.
. bench/lib.sh
profk_begin bench/profk_rank_whole.sh "${1:-}"
profk_checks "$B"
for setting in "PROFK_RANK_WHOLE=1" "PROFK_RANK_WHOLE=0 PROFK_ATTEMPTS=2"; do
  section "test selection (cuda), $setting" 150 env $setting "$B/selection" cuda
  section "profk bench --device cuda --check --no-table, $setting" 90 env $setting "$B/profk" bench --device cuda --check --no-table
done
date -u >> "$R"
OLD="PROFK_RANK_WHOLE=0 PROFK_ATTEMPTS=2"
for round in 1 2; do
  for setting in "$OLD" "PROFK_RANK_WHOLE=0" "PROFK_DEFAULTS=1" "PROFK_RANK_WHOLE=1"; do
    section "profk bench --device cuda --peers --only 2^2, $setting (round $round)" 60 env $setting "$B/profk" bench --device cuda --peers --only "2^2"
  done
done
section "profk bench --device cuda --stages --only 2^2" 90 "$B/profk" bench --device cuda --stages --only "2^2"
for shape in "2^24" "2^28"; do
  for setting in "$OLD" "PROFK_DEFAULTS=1" "PROFK_RANK_WHOLE=1"; do
    (export $setting; kernels "$shape, $setting" 8 bench --device cuda --peers --only "$shape")
  done
done
section "profk bench --device cuda --targets" 60 "$B/profk" bench --device cuda --targets
date -u >> "$R"
