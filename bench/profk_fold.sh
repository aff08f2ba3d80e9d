#!/usr/bin/env bash
# GPU side of one row's fallback folded into its output launch (kernels/rank_list.cuh `rank_whole`
# ranks a row that failed every attempt from its input; its plan takes a hundredth of the budget)
# against the build before it (.devbin/old/profk.xz, a fallback launch before the output launch), in
# one device call of about 5 min, from the repository root with .devbin/pkrows
# (bench/profk_rows_pack.sh), .devbin/old and .devbin/topk_peers.xz carried:
#   bash bench/profk_fold.sh
# The CUDA tests and every selector against the CPU path; Prof-K at 2^24 by the old build, the new
# one and the new one on the whole budget's plan (PROFK_WHOLE_LIST_EPS_DIV=1), three rounds, and 2^28
# by each build; Nsight Compute's kernels of a 2^24 call by each setting; then the single-row peers.
# (The stage table, with what a row failing every attempt costs: `profk bench --device cuda --stages`.)
. bench/lib.sh
profk_begin bench/profk_fold.sh "${1:-}"
profk_checks "$B"
unpack .devbin/old /tmp/old
date -u >> "$R"
settings=("/tmp/old" "$B" "$B PROFK_WHOLE_LIST_EPS_DIV=1")
for round in 1 2 3; do
  for s in "${settings[@]}"; do
    bin=${s%% *}
    sw=
    [ "$bin" != "$s" ] && sw=${s#* }
    # shellcheck disable=SC2086 # the switch is one word or none
    section "profk bench --device cuda --peers --only 2^24, $s (round $round)" 60 env $sw "$bin/profk" \
      bench --device cuda --peers --only "2^24"
  done
  for bin in /tmp/old "$B"; do
    section "profk bench --device cuda --peers --only 2^28, $bin (round $round)" 60 "$bin/profk" bench --device cuda --peers --only "2^28"
  done
done
B_NEW=$B
for s in "${settings[@]}"; do
  bin=${s%% *}
  sw=
  [ "$bin" != "$s" ] && sw=${s#* }
  (if [ -n "$sw" ]; then export "${sw?}"; fi; B=$bin kernels "2^24, $s" 9 bench --device cuda --peers --only "2^24")
done
B=$B_NEW
date -u >> "$R"
LIMIT=20 section "bench/topk_peers.sh f32 single" 200 bash bench/topk_peers.sh f32 single
date -u >> "$R"
