#!/usr/bin/env bash
# SAE step on the GPU machine, from the repo root: the CUDA tests of the sae crate, then `sae-bench`
# (BatchTopK, d = 1600, k = 32, (n, B) in {(2^16, 4096), (2^17, 8192)}, profk / sort / radix, TF32 / bf16 /
# f32, aux-k off / on, peak pool memory) and the dictionary_learning-style PyTorch step in the same call.
# Logs go to $OUT/sae/; a side-by-side table is printed last. About 2 minutes.
#
# The binaries come prebuilt in .devbin/sae/ (xz); see docs/perf/sae.md for the build commands.
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

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$LOG/device.txt" 2>&1
timeout 40 "$BIN/sparse_ops" --test-threads=1 >"$LOG/tests.log" 2>&1
TESTS_RC=$?

timeout 90 "$BIN/sae-bench" --device cuda --d 1600 --shapes "$SHAPES" --k 32 --selectors profk,sort,radix \
  --precisions tf32,bf16,f32 --aux --profile --warmup 2 --steps 5 >"$LOG/ours.md" 2>"$LOG/ours.err"
OURS_RC=$?

PYTHONUNBUFFERED=1 timeout 70 python3 bench/peers/dictionary_learning_step.py --shapes "$SHAPES" --d 1600 --k 32 \
  --precisions tf32,bf16,f32 --aux --warmup 2 --steps 5 >"$LOG/peer.md" 2>"$LOG/peer.err"
PEER_RC=$?

python3 - "$LOG" "$TESTS_RC" "$OURS_RC" "$PEER_RC" "$(( $(date +%s) - START ))" <<'EOF'
import sys, re
log, tests_rc, ours_rc, peer_rc, secs = sys.argv[1:]
def rows(path):
    out = []
    try:
        for line in open(path):
            if line.startswith("| ") and not line.startswith("| n ") and not line.startswith("|---"):
                out.append([c.strip() for c in line.strip().strip("|").split("|")])
    except OSError:
        pass
    return out
ours, peer = {}, {}
for r in rows(f"{log}/ours.md"):
    if len(r) == 10:  # main table: n B prec selector decode aux step select share peak
        ours[(r[0], r[1], r[2].lower(), r[5], r[3])] = r
for r in rows(f"{log}/peer.md"):
    peer[(r[0], r[1], r[2], r[3])] = r
tests = open(f"{log}/tests.log").read() if tests_rc is not None else ""
summary = re.findall(r"test result: .*", tests)
dev = open(f"{log}/device.txt").read().strip()
print(f"\nSAE step, {dev}; sparsetrain sae-bench vs dictionary_learning-style PyTorch step (same call)")
print(f"CUDA tests (sparse_ops): rc={tests_rc} {summary[-1] if summary else 'no result'}; "
      f"bench rc={ours_rc}, peer rc={peer_rc}; {secs} s")
print("d=1600, k=32, median ms of 5 steps after 2 warm-up; ours: step ms (selection ms) | peak GiB")
print("| n | B | prec | aux | ours profk | ours sort | ours radix | ours peak GiB | dict_learning | its topk | its peak GiB |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
keys = sorted({k[:4] for k in ours} | set(peer), key=lambda k: (int(k[0]), k[2], k[3]))
for k in keys:
    def cell(sel):
        r = ours.get(k + (sel,))
        return f"{r[6]} ({r[7]})" if r else "-"
    pr = ours.get(k + ("profk",))
    p = peer.get(k)
    print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {cell('profk')} | {cell('sort')} | {cell('radix')} | "
          f"{pr[9] if pr else '-'} | {p[4] if p else '-'} | {p[5] if p else '-'} | {p[6] if p else '-'} |")
EOF
echo
sed -n '/Stage medians/,$p' "$LOG/ours.md" | grep -E "profk|Stage|^\| n|---" | head -20
