#!/usr/bin/env bash
# GPU side of the filter issuing a round's four loads before it tests any (kernels/filter.cu: the
# threshold plus an opaque zero drawn from every load), against the profk CLI of the build before it
# (.devbin/old/profk.xz), whose machine code tested the first load's elements before it issued the
# other three. One device call of about 4 min, from the repository root with .devbin/pkrows
# (bench/profk_rows_pack.sh) and .devbin/old carried:
#   bash bench/profk_filter_loads.sh
# The CUDA tests and every selector against the CPU path; then Prof-K on every peer shape by both
# builds in two rounds, the targets by both, the stage table, and Nsight Compute's kernels of one
# call at 2^24 and 2^28 by both. Add .devbin/topk_peers.xz and run `LIMIT=10 bash
# bench/topk_peers.sh f32 single` after it for the peers.
. bench/lib.sh
profk_begin bench/profk_filter_loads.sh "${1:-}"
profk_checks "$B"
unpack .devbin/old /tmp/old
date -u >> "$R"
for round in 1 2; do
  for bin in /tmp/old "$B"; do
    section "profk bench --device cuda --peers, $bin (round $round)" 120 "$bin/profk" bench --device cuda --peers
  done
done
for bin in /tmp/old "$B"; do
  section "profk bench --device cuda --targets, $bin" 60 "$bin/profk" bench --device cuda --targets
done
section "profk bench --device cuda --stages --only 2^2" 90 "$B/profk" bench --device cuda --stages --only "2^2"
for shape in "2^24" "2^28"; do
  for bin in /tmp/old "$B"; do
    (B=$bin; kernels "$shape, $bin" 8 bench --device cuda --peers --only "$shape")
  done
done
date -u >> "$R"
