#!/usr/bin/env bash
# GPU side of the row kernel's guess margin capped below the warp slices' overflow (kernels/rows.cu
# `guess_rank`: k + min(k/2, (GUESS_SAFE - k)/2), at least 64) against the build before it
# (.devbin/old/profk.xz, k + max(k/2, 64)), in one device call of about 3 min, from the repository
# root with .devbin/pkrows (bench/profk_rows_pack.sh) and .devbin/old carried:
#   bash bench/profk_rows_margin.sh
# The CUDA tests and every selector against the CPU path; then Prof-K at 1024x2^18 (k = 64 and 1024)
# by each build in turn, f32, bf16 and f16, two rounds; the row kernel's reads (`profk select
# --stats`, three calls each) at k = 1024 in each type by each build; Nsight Compute's SM activity of
# the f32 k = 1024 kernel by each.
. bench/lib.sh
profk_begin bench/profk_rows_margin.sh "${1:-}"
profk_checks "$B"
unpack .devbin/old /tmp/old
date -u >> "$R"
for round in 1 2; do
  for dtype in f32 bf16 f16; do
    for bin in /tmp/old "$B"; do
      section "profk bench --device cuda --peers --dtype $dtype --only 1024x, $bin (round $round)" 60 \
        "$bin/profk" bench --device cuda --peers --dtype "$dtype" --only 1024x
    done
  done
done
python3 bench/rows_inputs.py /tmp
for dt in F32 BF16 F16; do
  for bin in /tmp/old "$B"; do
    echo "## profk select --stats, rows-$dt k = 1024, $bin (three calls)" >> "$R"
    for call in 1 2 3; do
      timeout 60 "$bin/profk" select --device cuda --stats --k 1024 --input "/tmp/rows-$dt.st" --tensor x \
        --output /tmp/o.st 2>&1 | grep -E "read_once|row_reads" | tr -d ' \n' >> "$R"
      echo >> "$R"
    done
  done
done
for bin in /tmp/old "$B"; do
  echo "## ncu 1024x2^18 f32 k = 1024, $bin" >> "$R"
  timeout 120 ncu --clock-control none -k regex:rows_ -c 1 \
    --metrics gpu__time_duration.sum,sm__cycles_active.avg,sm__cycles_active.min,sm__cycles_active.max \
    "$bin/profk" select --device cuda --k 1024 --input /tmp/rows-F32.st --tensor x --output /tmp/o.st 2>&1 |
    grep -E "duration|cycles" >> "$R"
done
date -u >> "$R"
