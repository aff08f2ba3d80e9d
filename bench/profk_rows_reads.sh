#!/usr/bin/env bash
# GPU side of the row kernel's reads per row (`profk select --stats`: rows read once, reads in all,
# most reads of one row), in one device call of about 3 min, from the repository root with
# .devbin/pkrows (bench/profk_rows_pack.sh) carried:
#   bash bench/profk_rows_reads.sh
# The CUDA tests and every selector against the CPU path; then three calls each on 1024x2^18 normal
# rows (f32, bf16, f16; k = 64 and 1024) and the masked 8192x32768 rows (f32; k = 64 and 512), and
# Prof-K's times on those shapes.
. bench/lib.sh
profk_begin bench/profk_rows_reads.sh "${1:-}"
profk_checks "$B"
date -u >> "$R"
python3 bench/rows_inputs.py /tmp
for input in rows-F32:64 rows-F32:1024 rows-BF16:64 rows-BF16:1024 rows-F16:64 rows-F16:1024 masked-F32:64 masked-F32:512; do
  file=${input%%:*} k=${input##*:}
  echo "## profk select --stats, $file k = $k (three calls)" >> "$R"
  for call in 1 2 3; do
    timeout 60 "$B/profk" select --device cuda --stats --k "$k" --input "/tmp/$file.st" --tensor x --output /tmp/o.st 2>&1 |
      grep -E "read_once|row_reads" | tr -d ' \n' >> "$R"
    echo >> "$R"
  done
done
for only in 1024x masked; do
  for dtype in f32 bf16 f16; do
    section "profk bench --device cuda --peers --dtype $dtype --only $only" 60 "$B/profk" bench --device cuda --peers --dtype "$dtype" --only "$only"
  done
done
date -u >> "$R"
