#!/usr/bin/env bash
# GPU side of the flat row's filter items, in one device call of < 5 min, from the repository root
# with .devbin/pkrows (bench/profk_rows_pack.sh) and .devbin/topk_peers.xz carried:
#   bash bench/profk_flat_items.sh
# The flat row (8192x2^17, k = 262144) keeps about 2000 elements a filter block when each block takes
# one item, at the edge of the block's stage (kernels/filter.cuh SCAP = 2048); past it every warp
# that keeps an element reserves its place with an atomic on the row's one counter. Its items are
# timed here as one, three and four a block (PROFK_FILTER_CHUNK): Nsight Compute's duration, DRAM
# traffic, atomics at L2 and long-scoreboard stalls of the first filter launch (2^30 at k = 8192 beside,
# whose blocks keep about 300), then `--targets` of the flat row in rounds of the three settings, then
# the single-row peers (CUB DeviceTopK, torch.topk) in the same call.
. bench/lib.sh
profk_begin bench/profk_flat_items.sh items
section "profk bench --device cuda --check --no-table" 90 "$B/profk" bench --device cuda --check --no-table
METRICS=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_requests_op_atom.sum,lts__t_requests_op_red.sum
METRICS=$METRICS,smsp__inst_executed.sum,smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio
# One item a block (the default), three, four: 2^30 / (264 x m) rounded up to the filter's step.
CHUNKS="default 1359872 1032192"
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
pass_metrics "2^30, one item a block" "2^30"
for chunk in $CHUNKS; do
  if [ "$chunk" = default ]; then unset PROFK_FILTER_CHUNK; else export PROFK_FILTER_CHUNK=$chunk; fi
  pass_metrics "flat, PROFK_FILTER_CHUNK=$chunk" "flat 8"
done
for round in 1 2; do
  for chunk in $CHUNKS; do
    if [ "$chunk" = default ]; then unset PROFK_FILTER_CHUNK; else export PROFK_FILTER_CHUNK=$chunk; fi
    section "round $round: --targets flat, PROFK_FILTER_CHUNK=$chunk" 60 \
      "$B/profk" bench --device cuda --targets --only "flat 8"
  done
done
unset PROFK_FILTER_CHUNK
date -u >>"$R"
LIMIT=20 section "bench/topk_peers.sh f32 single" 200 bash bench/topk_peers.sh f32 single
date -u >>"$R"
