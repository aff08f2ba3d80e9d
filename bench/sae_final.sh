#!/usr/bin/env bash
# SAE step on the GPU machine, from the repo root: the CUDA tests of the sae crate, then `sae-bench`
# (BatchTopK, d = 1600, k = 32, (n, B) in {(2^16, 4096), (2^17, 8192)}, profk / sort / radix, TF32 / bf16 /
# f32, aux-k off / on, peak pool memory) and the dictionary_learning-style PyTorch step in the same call.
# Writes three logs to $OUT/sae/ (tests.log, ours.md, peer.md) and prints a side-by-side table last.
# About 70 s; every stage has a timeout (140 s in all).
#
# The binaries come prebuilt in .devbin/sae/ (xz); docs/perf/sae.md gives the build commands.
set -uo pipefail
OUT=${OUT:-/tmp/out}
LOG=$OUT/sae
BIN=/tmp/sae-bin
mkdir -p "$LOG" "$BIN"
for f in sae-bench sparse_ops; do
  xz -dc ".devbin/sae/$f.xz" >"$BIN/$f" && chmod +x "$BIN/$f"
done
SHAPES=${SAE_SHAPES:-65536x4096,131072x8192}
START=$(date +%s)

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$LOG/tests.log" 2>&1
timeout 20 "$BIN/sparse_ops" --test-threads=1 >>"$LOG/tests.log" 2>&1
TESTS_RC=$?

# profk in a process of its own: the sort baselines keep a large workspace cached, which would count in
# the peak memory of every later row.
COMMON=(--device cuda --d 1600 --shapes "$SHAPES" --k 32 --precisions tf32,bf16,f32 --aux --warmup 2 --steps 5)
timeout 35 "$BIN/sae-bench" "${COMMON[@]}" --selectors profk --profile >"$LOG/ours.md" 2>&1
OURS_RC=$?
timeout 45 "$BIN/sae-bench" "${COMMON[@]}" --selectors sort,radix --profile >>"$LOG/ours.md" 2>&1
BASE_RC=$?

PYTHONUNBUFFERED=1 timeout 40 python3 bench/peers/dictionary_learning_step.py --shapes "$SHAPES" --d 1600 --k 32 \
  --precisions tf32,bf16,f32 --aux --warmup 2 --steps 5 >"$LOG/peer.md" 2>&1
PEER_RC=$?

python3 - "$LOG" "$TESTS_RC" "$OURS_RC/$BASE_RC" "$PEER_RC" "$(( $(date +%s) - START ))" <<'EOF'
import re, sys
log, tests_rc, ours_rc, peer_rc, secs = sys.argv[1:]
def rows(path):
    out = []
    for line in open(path, errors="replace"):
        if line.startswith("| ") and not line.startswith("| n ") and not line.startswith("|---"):
            out.append([c.strip() for c in line.strip().strip("|").split("|")])
    return out
ours, peer = {}, {}
for r in rows(f"{log}/ours.md"):
    if len(r) == 10:  # n B precision selector decode aux step select share peak
        ours[(r[0], r[1], r[2].lower(), r[5], r[3])] = r
for r in rows(f"{log}/peer.md"):
    if len(r) == 7:
        peer[(r[0], r[1], r[2], r[3])] = r
tests = open(f"{log}/tests.log", errors="replace").read()
dev = tests.splitlines()[0] if tests else "?"
result = re.findall(r"test result: .*", tests)
print(f"\nSAE training step on {dev}: sparsetrain sae-bench vs a dictionary_learning-style PyTorch step, same call")
print(f"CUDA tests (sae sparse_ops): rc={tests_rc}, {result[-1] if result else 'no result'}; "
      f"bench rc={ours_rc}, peer rc={peer_rc}; {secs} s")
print("BatchTopK, d=1600, k=32, median of 5 steps after 2 warm-up, ms. ours: step (selection); "
      "peak = pool high-water GiB (ours), torch max_memory_allocated GiB (peer)")
print("| n | B | prec | aux-k | ours profk | ours sort | ours radix | ours peak | dictionary_learning | its topk | its peak |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
keys = sorted({k[:4] for k in ours} | set(peer), key=lambda k: (int(k[0]), k[2], k[3]))
for k in keys:
    def cell(sel):
        r = ours.get(k + (sel,))
        return f"{r[6]} ({r[7]})" if r and r[7] != "-" else (r[6] if r else "-")
    pr, p = ours.get(k + ("profk",)), peer.get(k)
    print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {cell('profk')} | {cell('sort')} | {cell('radix')} | "
          f"{pr[9] if pr else '-'} | {p[4] if p else '-'} | {p[5] if p else '-'} | {p[6] if p else '-'} |")
EOF
echo
awk '/Stage medians/ {on = 1} on && /decode/ {exit} on && NF' "$LOG/ours.md"
