#!/usr/bin/env bash
# Final GPU check of the differentiable causal attention (gpt2::ops::causal_attention_train):
# its CUDA tests (forward and d(qkv) against a float64 composed-op reference, TF32 off and on,
# bit-reproducible reruns, clear errors), then forward and forward+backward times at GPT-2 Medium
# and XL head counts (4 x 512, hd 64, f32, TF32 on and off) beside the composed candle ops and
# PyTorch's F.scaled_dot_product_attention(is_causal=True) in the same call; tests and timings run
# for both GEMM batchings (per-sequence strided, and pointer arrays: `--gemm pointers`). About 40 s.
#
# Binaries (built on the development machine, from the repo root):
#   bash bench/pack.sh attention_train     # builds, strips + xz's both into .devbin/attention_train/
# Run on the GPU machine from the repo root: bash bench/attention_train.sh  (logs: $OUT/attention_train/)
set -uo pipefail
. bench/lib.sh
begin attention_train "${ATTN_BIN:-.devbin/attention_train}"
SHAPES="4x512x16x64 4x512x25x64"
# The tests cover both GEMM batchings; the benchmark runs once per batching: per-sequence strided
# (the default) and pointer arrays (one batched call over all sequences and heads).
run_test train_attention 30 "$B/train_attention" --nocapture --test-threads 1
: > "$LOG/ours.md"
for g in strided pointers; do
  timeout 20 "$B/attention_train_bench" --device cuda --shapes $SHAPES --gemm $g >> "$LOG/ours.md" 2>&1
  timeout 20 "$B/attention_train_bench" --device cuda --shapes $SHAPES --gemm $g --no-tf32 >> "$LOG/ours.md" 2>&1
done
timeout 40 python3 bench/peers/torch_attention_train.py --shapes $SHAPES > "$LOG/torch.md" 2>&1
timeout 40 python3 bench/peers/torch_attention_train.py --shapes $SHAPES --no-tf32 | tail -n +2 | grep -v '^|[ -]*b x\||---' | sed 's/$/ (TF32 off)/' >> "$LOG/torch.md" 2>&1
echo "## causal_attention_train, $GPU, $(date -u +%F), f32, medians in ms"
echo "CUDA tests:$TESTS"
python3 - "$LOG" <<'PY'
import re, sys
log = sys.argv[1]
ours = {}
for line in open(f"{log}/ours.md", errors="replace"):
    c = [x.strip() for x in line.strip().strip("|").split("|")]
    if len(c) == 7 and c[0] == "cuda":
        ours[(c[1], c[2])] = c[3:6]
peer = {}
for line in open(f"{log}/torch.md", errors="replace"):
    off = "(TF32 off)" in line
    c = [x.strip() for x in line.replace("(TF32 off)", "").strip().strip("|").split("|")]
    if len(c) == 4 and re.fullmatch(r"\d+ x \d+ x \d+ x \d+", c[0]):
        peer[(c[0], not off, c[1])] = c[3]
def ratio(a, b):
    try:
        return f"{float(a) / float(b):.2f}x"
    except (TypeError, ValueError):
        return "-"
print("| b x t x h x hd | GEMMs | ours fwd | ours fwd+bwd | candle composed fwd+bwd | torch SDPA default fwd+bwd | torch SDPA efficient | torch math | torch default / ours |")
print("|---|---|---|---|---|---|---|---|---|")
labels = ["TF32", "TF32, pointer arrays", "f32 (no TF32)", "f32 (no TF32), pointer arrays"]
for shape in sorted({k[0] for k in ours} | {k[0] for k in peer}):
    for label in labels:
        o = ours.get((shape, label), ["FAILED"] * 3)
        tf32 = label.startswith("TF32")
        p = [peer.get((shape, tf32, n), "-") for n in ("default", "efficient", "math")]
        print(f"| {shape} | {label} | {o[0]} | {o[1]} | {o[2]} | {p[0]} | {p[1]} | {p[2]} | {ratio(p[0], o[1])} |")
worst = {}
try:
    lines = open(f"{log}/test-train_attention.log", errors="replace").readlines()
except OSError:
    lines = []
for line in lines:
    m = re.search(r"^Cuda\S* tf32=(\w+) (\w+) .*: out ([0-9.e+-]+), d qkv ([0-9.e+-]+)", line)
    if m:
        k = f"{m.group(2)} tf32={m.group(1)}"
        worst[k] = max(worst.get(k, 0.0), float(m.group(3)), float(m.group(4)))
print("CUDA worst relative error vs f64: " + ", ".join(f"{k}: {v:.2e}" for k, v in sorted(worst.items())))
PY
fails=$(grep -h -A2 "panicked at" "$LOG"/test-*.log 2>/dev/null | head -6 | tr '\n' ' ')
[ -n "$fails" ] && echo "test failures: $fails"
echo "ratio > 1: ours faster (torch 'default' picks its f32 SDPA kernel). Logs: \$OUT/attention_train/ (test-*.log, ours.md, torch.md)"
