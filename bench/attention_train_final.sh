#!/usr/bin/env bash
# Final GPU check of the differentiable causal attention (activations::ops::causal_attention_train):
# its CUDA tests (forward and d(qkv) against a float64 composed-op reference, TF32 off and on,
# bit-reproducible reruns, clear errors), then forward and forward+backward times at GPT-2 Medium
# and XL head counts (4 x 512, hd 64, f32) beside the composed candle ops and PyTorch's
# F.scaled_dot_product_attention(is_causal=True) in the same call. About 1 min.
#
# Binaries (built on the development machine, from the repo root):
#   CARGO_TARGET_DIR=target-gpu ../shared/gpu/gpu-cargo.sh build --release -p activations --features cuda --test train_attention --example attention_train_bench
#   then strip + xz the newest target-gpu/release/deps/train_attention-* and
#   target-gpu/release/examples/attention_train_bench into .devbin/attn/{train_attention,attention_train_bench}.xz
# Run on the GPU machine from the repo root: bash bench/attention_train_final.sh  (logs: $OUT/attention_train/)
set -uo pipefail
LOG=${OUT:-/tmp}/attention_train; mkdir -p "$LOG"
B=/tmp/attnbin; mkdir -p "$B"
for f in "${ATTN_BIN:-.devbin/attn}"/*.xz; do n=$(basename "$f" .xz); xz -dc "$f" > "$B/$n" && chmod +x "$B/$n"; done
GPU=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)
SHAPES="4x512x16x64 4x512x25x64"
if timeout 40 "$B/train_attention" --nocapture --test-threads 1 > "$LOG/test.log" 2>&1; then r=ok; else r=FAILED; fi
tests="$(grep -Eo 'test result: [a-zA-Z]+\. [0-9]+ passed; [0-9]+ failed' "$LOG/test.log" | tail -1 | sed 's/test result: //') ($r)"
timeout 30 "$B/attention_train_bench" --device cuda --shapes $SHAPES > "$LOG/ours.md" 2>&1
timeout 30 "$B/attention_train_bench" --device cuda --shapes $SHAPES --no-tf32 >> "$LOG/ours.md" 2>&1
timeout 40 python3 bench/peers/torch_attention_train.py --shapes $SHAPES > "$LOG/torch.md" 2>&1
timeout 40 python3 bench/peers/torch_attention_train.py --shapes $SHAPES --no-tf32 | tail -n +2 | grep -v '^|[ -]*b x\||---' | sed 's/$/ (TF32 off)/' >> "$LOG/torch.md" 2>&1
echo "## causal_attention_train, $GPU, $(date -u +%F), f32, medians in ms"
echo "CUDA tests: $tests"
python3 - "$LOG" <<'PY'
import re, sys
log = sys.argv[1]
ours = {}
for line in open(f"{log}/ours.md", errors="replace"):
    c = [x.strip() for x in line.strip().strip("|").split("|")]
    if len(c) == 7 and c[0] == "cuda":
        ours[(c[1], c[2] == "TF32")] = c[3:6]
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
shapes = sorted({k[0] for k in ours} | {k[0] for k in peer})
for shape in shapes:
    for tf32 in (True, False):
        o = ours.get((shape, tf32), ["FAILED"] * 3)
        p = [peer.get((shape, tf32, n), "-") for n in ("default", "efficient", "math")]
        print(f"| {shape} | {'TF32' if tf32 else 'f32'} | {o[0]} | {o[1]} | {o[2]} | {p[0]} | {p[1]} | {p[2]} | {ratio(p[0], o[1])} |")
worst = {}
for line in open(f"{log}/test.log", errors="replace"):
    m = re.search(r"^Cuda\S* tf32=(\w+).*: out ([0-9.e+-]+), d qkv ([0-9.e+-]+)", line)
    if m:
        k = m.group(1)
        worst[k] = max(worst.get(k, 0.0), float(m.group(2)), float(m.group(3)))
print("CUDA worst relative error vs f64: " + ", ".join(f"tf32={k}: {v:.2e}" for k, v in sorted(worst.items())))
PY
fails=$(grep -h -A2 "panicked at" "$LOG/test.log" 2>/dev/null | head -6 | tr '\n' ' ')
[ -n "$fails" ] && echo "test failures: $fails"
echo "ratio > 1: ours faster (torch 'default' picks its f32 SDPA kernel). Logs: \$OUT/attention_train/ (test.log, ours.md, torch.md)"
