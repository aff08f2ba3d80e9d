#!/usr/bin/env bash
# Final GPU check of activations::ops::linear_train: its CUDA tests (forward and the three
# gradients against float64 references, f32 with TF32 off and on, bf16, f16) and the forward-only
# linear tests (ops), then forward + backward times of one linear layer at n = 2048 tokens
# (GPT-2 XL widths, f32 with TF32) beside PyTorch (F.linear + F.gelu(approximate='tanh'), TF32)
# in the same call. About 1 min.
#
# Binaries (built on the development machine, from the repo root): bash bench/linear_train_pack.sh
# Run on the GPU machine from the repo root: bash bench/linear_train_final.sh  (logs: $OUT/linear_train/)
set -uo pipefail
LOG=${OUT:-/tmp}/linear_train; mkdir -p "$LOG"
. bench/lib.sh
B=/tmp/linbin; unpack "${LIN_BIN:-.devbin/lin}" "$B"
# The ops test reads its fixture by the path it was built at (unpack links /work/main).
for root in ${LIN_BUILT_AT:-}; do
  [ -e "$root" ] || { mkdir -p "$(dirname "$root")" && ln -s "$PWD" "$root"; }
done
GPU=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)
tests=""
for t in train_linear ops; do
  if (cd activations && timeout 60 "$B/$t" --test-threads 4) > "$LOG/test-$t.log" 2>&1; then r=ok; else r=FAILED; fi
  tests="$tests $t: $(grep -Eo 'test result: [a-zA-Z]+\. [0-9]+ passed; [0-9]+ failed' "$LOG/test-$t.log" | tail -1 | sed 's/test result: //') ($r);"
done
timeout 40 "$B/linear_train_bench" --device cuda --iters 30 > "$LOG/ours.md" 2> "$LOG/ours.err"
timeout 40 python3 bench/peers/linear_train_torch.py --iters 30 > "$LOG/torch.md" 2> "$LOG/torch.err"
echo "## linear_train, $GPU, $(date -u +%F)"
echo "tests:$tests"
echo
echo "Forward + backward (x, W, b) of one layer, n = 2048 tokens, f32 with TF32 products; medians of 30."
echo "Ours: wall time with a device sync per run; torch: CUDA events. Floor: 6 n d_in d_out flops at 494 TFLOP/s."
echo
echo "| d_in | d_out | act | floor ms | linear_train ms | candle composed ms | torch ms | fwd only: ours / composed / torch ms |"
echo "|---|---|---|---|---|---|---|---|"
paste -d'|' <(grep -E '^\| cuda' "$LOG/ours.md") <(grep -E 'TF32 \|' "$LOG/torch.md") |
  awk -F'|' '{gsub(/ /,""); printf "| %s | %s | %s | %s | %s | %s | %s | %s / %s / %s |\n", $4, $5, $6, $7, $8, $9, $19, $10, $11, $20}'
