#!/usr/bin/env bash
# SAE step on the GPU machine, from the repo root: the CUDA tests of the sae crate, then `sae-bench`
# (BatchTopK with profk, d = 1600, k = 32, (n, B) in {(2^16, 4096), (2^17, 8192)}, TF32 / bf16 / f32,
# aux-k off / 5 % of the latents dead / all dead, the aux-k loss in its automatic form and in the sparse
# pair form, peak pool memory) and the dictionary_learning-style PyTorch step with the same dead sets, in
# the same call. Writes logs to $OUT/sae/ (tests.log, ours.md, peer.md) and prints a side-by-side table
# last. About 100 s; every stage has a timeout.
#
# SAE_QUICK=1: only the CUDA tests and our step (profk, TF32 / bf16, both shapes, aux-k off / 5 % dead /
# all dead in its automatic form) with the stage table; no peer, no sparse form, no f32; under 120 s.
#
# The binaries come packed in .devbin/sae/ (`bash bench/pack.sh sae`, here on the machine without a
# GPU; .devbin/sae/BUILD, if written, names the commit they were built from).
set -uo pipefail
QUICK=${SAE_QUICK:-0}
# Keep every JIT-compiled PTX module of candle's in the driver's cache for the later processes.
export CUDA_CACHE_MAXSIZE=${CUDA_CACHE_MAXSIZE:-4294967296}
. bench/lib.sh
begin sae .devbin/sae
SHAPES=${SAE_SHAPES:-65536x4096,131072x8192}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$LOG/tests.log" 2>&1
# The pair-kernel tests (sae/tests/it/sparse_ops.rs) by name in sae's one test binary.
SPARSE_OPS_TESTS=$(module_tests "$B/sae_it" sparse_ops)
COMMON=(--device cuda --d 1600 --shapes "$SHAPES" --k 32 --selectors profk --warmup 2 --steps 5)
if [ "$QUICK" = 1 ]; then
  # A fresh machine JIT-compiles candle's PTX modules first (~15 s).
  # shellcheck disable=SC2086 # one word per test name
  timeout 70 "$B/sae_it" --test-threads=1 --exact $SPARSE_OPS_TESTS >>"$LOG/tests.log" 2>&1
  TESTS_RC=$?
  timeout 26 "$B/sae-bench" "${COMMON[@]}" --precisions tf32,bf16 --dead 0,0.05,1 --aux-decodes auto \
    --profile >"$LOG/ours.md" 2>&1
  OURS_RC=$?
  : >"$LOG/peer.md"
  PEER_RC="not run (SAE_QUICK)"
else
  # On a fresh machine the first CUDA process JIT-compiles candle's PTX modules (tens of seconds).
  # shellcheck disable=SC2086
  timeout 120 "$B/sae_it" --test-threads=1 --exact $SPARSE_OPS_TESTS >>"$LOG/tests.log" 2>&1
  TESTS_RC=$?
  timeout 45 "$B/sae-bench" "${COMMON[@]}" --precisions tf32,bf16 --dead 0,0.05,1 --aux-decodes sparse,auto \
    --profile >"$LOG/ours.md" 2>&1
  OURS_RC=$?
  PYTHONUNBUFFERED=1 timeout 70 python3 bench/peers/dictionary_learning_step.py --shapes "$SHAPES" --d 1600 --k 32 \
    --precisions tf32,bf16 --dead 0,0.05,1 --warmup 2 --steps 5 >"$LOG/peer.md" 2>&1
  PEER_RC=$?
  timeout 25 "$B/sae-bench" "${COMMON[@]}" --precisions f32 --dead 0,1 >>"$LOG/ours.md" 2>&1
  OURS_RC="$OURS_RC/$?"
  PYTHONUNBUFFERED=1 timeout 45 python3 bench/peers/dictionary_learning_step.py --shapes "$SHAPES" --d 1600 --k 32 \
    --precisions f32 --dead 0,1 --warmup 2 --steps 5 >>"$LOG/peer.md" 2>&1
  PEER_RC="$PEER_RC/$?"
fi

python3 - "$LOG" "$TESTS_RC" "$OURS_RC" "$PEER_RC" "$((SECONDS - START))" <<'PY'
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
    if len(r) == 11:  # n B precision selector decode dead form step select share peak
        form = "sparse" if r[6] == "sparse" else "auto"
        ours[(r[0], r[1], r[2].lower(), r[5], form)] = r
for r in rows(f"{log}/peer.md"):
    if len(r) == 7:  # n B precision dead step topk peak
        peer[(r[0], r[1], r[2], r[3])] = r
tests = open(f"{log}/tests.log", errors="replace").read()
dev = tests.splitlines()[0] if tests else "?"
result = re.findall(r"test result: .*", tests)
failed = re.findall(r"test (\S+) \.\.\. FAILED", tests)
def num(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return None
def extra(step, off):
    s, o = num(step), num(off)
    return f"+{s - o:.2f} ({100 * (s - o) / o:.1f} %)" if s is not None and o else "-"
peer_what = ("no peer (SAE_QUICK=1: ours only, aux-k in its automatic form)" if peer_rc.startswith("not run")
             else "vs a dictionary_learning-style PyTorch step, same call")
print(f"\nSAE training step on {dev}: sparsetrain sae-bench {peer_what}")
try:
    print("binaries: " + open(".devbin/sae/BUILD").read().strip())
except OSError:
    pass
oks = len(re.findall(r" \.\.\. ok", tests))
print(f"CUDA tests (sae sparse_ops): rc={tests_rc}, {result[-1] if result else f'no result ({oks} ok before the stop)'}"
      f"{'; FAILED: ' + ', '.join(failed) if failed else ''}; bench rc={ours_rc}, peer rc={peer_rc}; {secs} s")
print("BatchTopK, d=1600, k=32, k_aux=800, profk; median of 5 steps after 2 warm-up, ms. 'aux dead': fixed random "
      "fraction of latents held dead (aux-k off when none). ours: step (form of the aux-k loss: auto picks dense "
      "matmuls over the dead columns or the sparse pairs by a cost rule); 'ours, pairs': the sparse pair form "
      "forced. aux cost: ms and % over the same row with aux-k off. peak: pool high-water GiB (ours), "
      "torch max_memory_allocated GiB (peer)")
print("| n | B | prec | aux dead | ours | ours aux cost | ours, pairs | ours peak | dictionary_learning | peer aux cost | its topk | its peak |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
keys = sorted({k[:4] for k in ours} | set(peer),
              key=lambda k: (int(k[0]), {"tf32": 0, "bf16": 1, "f32": 2}.get(k[2], 3), -1.0 if k[3] == "off" else float(k[3].rstrip(" %"))))
for k in keys:
    a, s, p = ours.get(k + ("auto",)), ours.get(k + ("sparse",)), peer.get(k)
    a_off, p_off = ours.get(k[:3] + ("off", "auto")), peer.get(k[:3] + ("off",))
    cell = (f"{a[7]} ({a[6]})" if a[6] != "-" else a[7]) if a else "-"
    print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {cell} | "
          f"{extra(a[7], a_off[7]) if a and a_off and k[3] != 'off' else '-'} | "
          f"{s[7] if s else '-'} | "
          f"{a[10] if a else '-'} | {p[4] if p else '-'} | "
          f"{extra(p[4], p_off[4]) if p and p_off and k[3] != 'off' else '-'} | {p[5] if p else '-'} | "
          f"{p[6] if p else '-'} |")
PY
echo
awk '/Stage medians/ {on = 1} on && /[|] decode [|]/ {exit} on && NF' "$LOG/ours.md"
