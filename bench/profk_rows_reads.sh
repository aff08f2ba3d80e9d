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
python3 - <<'PY'
import json, struct, numpy as np
def write(path, x, dtype):
    if dtype == "BF16":
        d = (x.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    elif dtype == "F16":
        d = x.astype(np.float16).tobytes()
    else:
        d = x.tobytes()
    h = json.dumps({"x": {"dtype": dtype, "shape": list(x.shape), "data_offsets": [0, len(d)]}}).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h))); f.write(h); f.write(d)
x = np.random.default_rng(0).standard_normal((1024, 1 << 18), dtype=np.float32)
for dt in ("F32", "BF16", "F16"):
    write(f"/tmp/rows-{dt}.st", x, dt)
m = np.random.default_rng(1).standard_normal((8192, 32768), dtype=np.float32)
m[:, 16384:] = -np.inf
write("/tmp/masked-F32.st", m, "F32")
PY
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
