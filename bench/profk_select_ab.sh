#!/usr/bin/env bash
# GPU side of an A/B of the list selection's loads, in one device call of < 4 min, from the repository
# root with .devbin/pkrows (B: bench/profk_rows_pack.sh) and .devbin/pkrows-a (A: the build before the
# change) carried:
#   bash bench/profk_select_ab.sh
# B's count and compaction of a list (kernels/select.cu count_digit, compact_body) load four rounds of
# a chunk before they use any; A waited on each round's load from L2 in turn. The flat row's buffer
# selection walks 7 rounds a block in each of its digits and its compaction. The CUDA tests and
# `--check` on B first; then the flat rows (`--targets`) and, as a control, 128x2^20 (`--peers`: its
# buffers are selected one block a row, which the change leaves alone) by B and by A in alternation,
# twice; then Nsight Compute's kernel durations of one flat call by each. A's build predates B's
# defaults for the filter's items, the sort's tiles and the fallback's grid; both run with those
# settings named, so that the loads are the only difference.
. bench/lib.sh
export PROFK_FILTER_CHUNK=capacity PROFK_SORT_TILE=2048 PROFK_FALLBACK_PER_SM=1
profk_begin bench/profk_select_ab.sh ab
unpack .devbin/pkrows-a /tmp/a
profk_checks "$B"
for rep in 1 2; do
  for side in B A; do
    bin=$B/profk
    [ $side = A ] && bin=/tmp/a/profk
    section "$side, round $rep: --targets --only flat" 60 "$bin" bench --device cuda --targets --only flat
    section "$side, round $rep: --peers --only 128x2^20" 60 "$bin" bench --device cuda --peers --only 128x2^20
  done
done
date -u >>"$R"
kernels "B, flat 8192x2^17" 20 bench --device cuda --peers --only "flat 8"
(B=/tmp/a && kernels "A, flat 8192x2^17" 20 bench --device cuda --peers --only "flat 8")
date -u >>"$R"
