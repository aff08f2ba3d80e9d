#!/usr/bin/env bash
# GPU side of three Prof-K leads, each setting timed against the others by its switch on one build,
# in one device call of < 10 min, from the repository root with .devbin/pkrows
# (bench/profk_rows_pack.sh) and .devbin/topk_peers.xz carried:
#   bash bench/profk_leads.sh
# Two on the flat row (8192x2^17, k = 262144):
# - Filter items. With one item a block (PROFK_FILTER_CHUNK=one, the former default), a flat row's
#   block keeps about 2000 elements, at the edge of its stage (kernels/filter.cuh SCAP = 2048); past
#   it every warp that keeps an element reserves its place with an atomic on the row's one counter.
#   The default sizes the items from the buffer's capacity: three a block. Nsight Compute's duration,
#   DRAM traffic, atomics at L2 and long-scoreboard stalls of the first filter launch under both
#   (2^30 at k = 8192 beside, about 300 kept a block).
# - Sort tiles. CUB's sm_90 tuning (the default, PROFK_SORT_TILE=cub) sorts 64-bit keys in tiles of
#   5760, so the 262144 composites of the value order make about 46 tiles a pass;
#   PROFK_SORT_TILE=2048|1024 sorts one-row lists of up to 2^21 keys in tiles of that many. Nsight
#   Compute's durations of the sort's kernels under all three.
# Then `--targets` of the flat rows in rounds of four settings (tiles of 1024 only under Nsight Compute).
# One on the single rows: the dense fallback's cooperative launch, nearly always on no row, with one
# block an SM (the default) against four (PROFK_FALLBACK_PER_SM=4): the stage table and rounds of
# `--peers` at 2^24 and 2^28 under both.
# The CUDA tests and --check on the defaults first (the former settings are the ones every earlier
# call tested), then the single-row peers (CUB DeviceTopK, torch.topk) beside the defaults.
. bench/lib.sh
profk_begin bench/profk_leads.sh leads
profk_checks "$B"
date -u >>"$R"
LIMIT=20 section "bench/topk_peers.sh f32 single" 200 bash bench/topk_peers.sh f32 single
date -u >>"$R"
METRICS=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_requests_op_atom.sum,lts__t_requests_op_red.sum
METRICS=$METRICS,smsp__inst_executed.sum,smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio
# One item a block, or items sized from the buffer's capacity (the default): three a block for the
# flat row, 2^30 / (264 x 3) rounded up to the filter's step (work_split::filter_items_for_capacity).
CHUNKS="one capacity"
# pass_metrics LABEL SHAPE: the metrics of the first filter launch of `--peers --only SHAPE`.
pass_metrics() {
  echo "## ncu $1: metric, unit, value" >>"$R"
  timeout 150 ncu --clock-control none -k regex:'^filter_f32' -c 1 --metrics "$METRICS" --csv \
    "$B/profk" bench --device cuda --peers --only "$2" 2>/dev/null | python3 -c '
import csv, sys
rows = [r for r in csv.reader(sys.stdin) if len(r) > 5]
if rows:
    h = rows[0]
    name, unit, value = (h.index(c) for c in ("Metric Name", "Metric Unit", "Metric Value"))
    for r in rows[1:]:
        print("|", r[name], "|", r[unit], "|", r[value], "|")' >>"$R"
}
# set_chunk CHUNK: PROFK_FILTER_CHUNK for one setting.
set_chunk() { export PROFK_FILTER_CHUNK=$1; }
pass_metrics "2^30, one item a block" "2^30"
for chunk in $CHUNKS; do
  set_chunk "$chunk"
  pass_metrics "flat, PROFK_FILTER_CHUNK=$chunk" "flat 8"
done
unset PROFK_FILTER_CHUNK
TILES="cub 2048 1024"
for tile in $TILES; do
  export PROFK_SORT_TILE=$tile
  kernels "flat 8192x2^17, PROFK_SORT_TILE=$tile" 20 bench --device cuda --peers --only "flat 8"
done
unset PROFK_SORT_TILE
for round in 1 2; do
  for chunk in $CHUNKS; do
    set_chunk "$chunk"
    for tile in cub 2048; do
      section "round $round: --targets flat, PROFK_FILTER_CHUNK=$chunk, PROFK_SORT_TILE=$tile" 60 \
        env PROFK_SORT_TILE=$tile "$B/profk" bench --device cuda --targets --only "flat"
    done
  done
done
unset PROFK_FILTER_CHUNK
date -u >>"$R"
for cap in 4 1; do
  section "--stages 2^2x, PROFK_FALLBACK_PER_SM=$cap" 90 env "PROFK_FALLBACK_PER_SM=$cap" \
    "$B/profk" bench --device cuda --stages --only "2^2"
done
for round in 1 2; do
  for cap in 4 1; do
    section "round $round: --peers 2^2x, PROFK_FALLBACK_PER_SM=$cap" 60 env "PROFK_FALLBACK_PER_SM=$cap" \
      "$B/profk" bench --device cuda --peers --only "2^2"
  done
done
date -u >>"$R"
