#!/usr/bin/env bash
# GPU side of one row's fallback folded into its output launch (kernels/rank_list.cuh `rank_whole`
# ranks a row that failed every attempt from its input; its plan takes a hundredth of the budget)
# against the build before it (.devbin/old/profk.xz, a fallback launch before the output launch), in
# one device call of about 5 min, from the repository root with .devbin/pkrows
# (bench/profk_rows_pack.sh), .devbin/old and .devbin/topk_peers.xz carried:
#   bash bench/profk_fold.sh
# The CUDA tests and every selector against the CPU path; Prof-K at 2^24 and 2^28 by each build in
# turn, three rounds; the stage table at 2^24 by each build (with what a row failing every attempt
# costs); Nsight Compute's kernels of a 2^24 call by each; then the single-row peers.
. bench/lib.sh
profk_begin bench/profk_fold.sh "${1:-}"
profk_checks "$B"
unpack .devbin/old /tmp/old
date -u >> "$R"
for round in 1 2 3; do
  for bin in /tmp/old "$B"; do
    for shape in "2^24" "2^28"; do
      section "profk bench --device cuda --peers --only $shape, $bin (round $round)" 60 \
        "$bin/profk" bench --device cuda --peers --only "$shape"
    done
  done
done
for bin in /tmp/old "$B"; do
  section "profk bench --device cuda --stages --only 2^24, $bin" 90 "$bin/profk" bench --device cuda --stages --only "2^24"
done
B_NEW=$B
for bin in /tmp/old "$B_NEW"; do
  B=$bin kernels "2^24, $bin" 12 bench --device cuda --peers --only "2^24"
done
B=$B_NEW
date -u >> "$R"
LIMIT=20 section "bench/topk_peers.sh f32 single" 200 bash bench/topk_peers.sh f32 single
date -u >> "$R"
