#!/usr/bin/env bash
# GPU side of an A/B of the row kernel, in one device call of < 10 min, from the repository root with
# .devbin/pkrows (B: bench/profk_rows_pack.sh) and .devbin/pkrows-a (A: the profk CLI of the other
# form) carried:
#   bash bench/profk_rows_ab.sh
# The rows test body and `--check` on B; then the masked rows and 1024x2^18 (`--peers`, the peer
# table's path) by B and by A, twice over in alternation; then B's row kernel on the masked rows at
# k = 512 under Nsight Compute with its source counters (instructions executed and warp stalls by SASS
# instruction, a CSV file beside the log; a build with CUDA_LINEINFO=1 maps them to source lines).
. bench/lib.sh
profk_begin bench/profk_rows_ab.sh ab
unpack .devbin/pkrows-a /tmp/a
section "test rows (cuda)" 150 "$B/rows" cuda
section "profk bench --device cuda --check --no-table" 90 "$B/profk" bench --device cuda --check --no-table
for rep in 1 2; do
  for dt in f32 bf16; do
    section "B $dt: profk bench --device cuda --peers --only masked" 60 "$B/profk" bench --device cuda --peers --dtype $dt --only masked
    section "A $dt: profk bench --device cuda --peers --only masked" 60 /tmp/a/profk bench --device cuda --peers --dtype $dt --only masked
  done
done
section "B f32: profk bench --device cuda --peers --only 1024x2^18" 60 "$B/profk" bench --device cuda --peers --only 1024x2^18
section "A f32: profk bench --device cuda --peers --only 1024x2^18" 60 /tmp/a/profk bench --device cuda --peers --only 1024x2^18
date -u >>"$R"
python3 bench/masked_input.py /tmp/masked.safetensors
timeout 200 ncu --clock-control none -k regex:rows_topk --launch-count 1 --section SourceCounters \
  --section WarpStateStats --section SchedulerStats --import-source yes -f -o /tmp/src \
  "$B/profk" select --input /tmp/masked.safetensors --tensor x --k 512 --order index --device cuda \
  --output /tmp/o.safetensors >"$OUT/ncu.txt" 2>&1
ncu -i /tmp/src.ncu-rep --page source --csv --print-source sass >"$OUT/src_sass.csv" 2>"$OUT/src_sass.err"
ncu -i /tmp/src.ncu-rep --page details >>"$OUT/ncu.txt" 2>&1
date -u >>"$R"
