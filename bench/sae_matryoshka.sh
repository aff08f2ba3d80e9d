#!/usr/bin/env bash
# Matryoshka and the crosscoder at BatchTopK's speed, on the GPU machine, from the repo root: the CUDA tests
# of the prefix loss, the crosscoder and the aux-k reference (sae/tests/it/matryoshka.rs) and of the pair
# kernels (sparse_ops), then `sae-bench --archs matryoshka,crosscoder` (d = 1600, k = 32, profk, TF32,
# (n, B) in {(2^16, 4096), (2^17, 8192)}: Matryoshka with groups n/32, n/16, n/8 and the rest beside
# BatchTopK over d; the crosscoder over 3 × 1600 beside BatchTopK over 4800), and dictionary_learning's own
# BatchTopKTrainer.update and MatryoshkaBatchTopKTrainer.update (its wheel from .whl/, installed here
# without its dependencies), in the same call. Writes logs to $OUT/sae-m/ (tests.log, ours.md, peer.md)
# and prints one table last. About 3 min; every stage has a timeout.
#
# SAE_PRECISIONS (default tf32) adds bf16 / f32 rows on both sides; SAE_SHAPES overrides the shapes.
#
# SAE_M_PACK (default .devbin/sae_matryoshka) is where the packed binaries are.
# The binaries come prebuilt in .devbin/sae_matryoshka/ and the wheel in .whl/ (bash bench/pack.sh sae_matryoshka);
# carry both.
set -uo pipefail
export CUDA_CACHE_MAXSIZE=${CUDA_CACHE_MAXSIZE:-4294967296}
OUT=${OUT:-/tmp/out}
LOG=$OUT/sae-m
BIN=/tmp/sae-m-bin
mkdir -p "$LOG"
. bench/lib.sh
unpack "${SAE_M_PACK:-.devbin/sae_matryoshka}" "$BIN"
SHAPES=${SAE_SHAPES:-65536x4096,131072x8192}
PRECISIONS=${SAE_PRECISIONS:-tf32}
START=$(date +%s)

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$LOG/tests.log" 2>&1
# A fresh machine JIT-compiles candle's PTX modules in the first CUDA process (tens of seconds).
# shellcheck disable=SC2046 # one word per test name
timeout 150 "$BIN/sae_it" --test-threads=1 --exact $(module_tests "$BIN/sae_it" matryoshka) >>"$LOG/tests.log" 2>&1
TESTS_RC=$?
# shellcheck disable=SC2046
timeout 120 "$BIN/sae_it" --test-threads=1 --exact $(module_tests "$BIN/sae_it" sparse_ops) >>"$LOG/tests.log" 2>&1
TESTS_RC="$TESTS_RC/$?"
timeout 150 "$BIN/sae-bench" --device cuda --d 1600 --shapes "$SHAPES" --k 32 --selectors profk \
  --precisions "$PRECISIONS" --archs matryoshka,crosscoder --layers 3 --warmup 2 --steps 5 --profile \
  >"$LOG/ours.md" 2>&1
OURS_RC=$?
PEER_RC="not run"
if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  .whl/dictionary_learning-*.whl >"$LOG/peer.md" 2>&1; then
  PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 timeout 150 python3 bench/peers/dictionary_learning_matryoshka.py \
    --shapes "$SHAPES" --d 1600 --k 32 --precisions "$PRECISIONS" --warmup 2 --steps 5 >>"$LOG/peer.md" 2>&1
  PEER_RC=$?
fi

python3 - "$LOG" "$TESTS_RC" "$OURS_RC" "$PEER_RC" "$(( $(date +%s) - START ))" <<'PY'
import re, sys
log, tests_rc, ours_rc, peer_rc, secs = sys.argv[1:]
def rows(path):
    out = []
    for line in open(path, errors="replace"):
        if line.startswith("| ") and not line.startswith("|---"):
            out.append([c.strip() for c in line.strip().strip("|").split("|")])
    return out
def num(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return None
ours = {}  # (arch, n, B, precision) -> (step, batchtopk, ratio); rows without dead latents only
for r in rows(f"{log}/ours.md"):
    if len(r) == 12 and r[0] != "arch" and r[6] == "off":
        ours[(r[0].split()[0], r[1], r[2], r[4].lower())] = (r[7], r[8], r[9])
peer = {}  # (trainer, n, B, precision) -> step
for r in rows(f"{log}/peer.md"):
    if len(r) == 6 and r[0] != "trainer":
        peer[(r[0], r[1], r[2], r[3])] = r[4]
tests = open(f"{log}/tests.log", errors="replace").read()
dev = tests.splitlines()[0] if tests else "?"
results = re.findall(r"test result: .*", tests)
failed = re.findall(r"test (\S+) \.\.\. FAILED", tests)
print(f"\nMatryoshka and crosscoder vs BatchTopK on {dev}: sparsetrain sae-bench and dictionary_learning 0.1.0's own "
      f"trainers, same call; {secs} s")
print(f"CUDA tests (matryoshka, sparse_ops): rc={tests_rc}; " + (" / ".join(results) if results else "no result")
      + (f"; FAILED: {', '.join(failed)}" if failed else "") + f"; bench rc={ours_rc}, peer rc={peer_rc}")
print("d=1600, k=32, profk, aux-k off; median of 5 steps after 2 warm-up, ms. Matryoshka groups n/32, n/16, n/8, rest; "
      "crosscoder 3 × 1600 against BatchTopK at d = 4800. Targets: Matryoshka <= 1.15x our BatchTopK and <= 0.5x "
      "dictionary_learning's MatryoshkaBatchTopKTrainer.update; crosscoder <= 1.2x BatchTopK of the same width.")
print("| n | B | prec | our BatchTopK | our Matryoshka | ratio | dl BatchTopK | dl Matryoshka | ours / dl Matryoshka | "
      "BatchTopK 4800 | crosscoder 3x1600 | ratio |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
keys = sorted({k[1:] for k in ours} | {k[1:] for k in peer}, key=lambda k: (int(k[0]), k[2]))
for n, b, prec in keys:
    m = ours.get(("matryoshka", n, b, prec))
    c = ours.get(("crosscoder", n, b, prec))
    dl_b, dl_m = peer.get(("batchtopk", n, b, prec)), peer.get(("matryoshka", n, b, prec))
    vs = f"{num(m[0]) / num(dl_m):.2f}" if m and num(m[0]) and num(dl_m) else "-"
    print(f"| {n} | {b} | {prec} | {m[1] if m else '-'} | {m[0] if m else '-'} | {m[2] if m else '-'} | "
          f"{dl_b or '-'} | {dl_m or '-'} | {vs} | {c[1] if c else '-'} | {c[0] if c else '-'} | {c[2] if c else '-'} |")
PY
echo
awk '/Stage medians/ {on = 1} on && NF' "$LOG/ours.md"
