#!/usr/bin/env bash
# Final GPU check of gpt2::ops::linear_train: its CUDA tests (forward and the three
# gradients against float64 references, f32 with TF32 off and on, bf16, f16) and the forward-only
# linear tests (ops), then forward + backward times of one linear layer at n = 2048 tokens
# (GPT-2 XL widths, f32 with TF32) beside PyTorch (F.linear + F.gelu(approximate='tanh'), TF32)
# in the same call. About 1 min.
#
# Binaries (built on the development machine, from the repo root): bash bench/pack.sh linear_train
# Run on the GPU machine from the repo root: bash bench/linear_train.sh  (logs: $OUT/linear_train/)
set -uo pipefail
. bench/lib.sh
begin linear_train "${LIN_BIN:-.devbin/linear_train}"
run_test train_linear 60 "$B/train_linear" --test-threads 4
# shellcheck disable=SC2046 # one word per test name
run_test ops 60 "$B/gpt2_it" --test-threads 4 --exact $(module_tests "$B/gpt2_it" ops)
timeout 40 "$B/linear_train_bench" --device cuda --iters 30 > "$LOG/ours.md" 2> "$LOG/ours.err"
timeout 40 python3 bench/peers/linear_train_torch.py --iters 30 > "$LOG/torch.md" 2> "$LOG/torch.err"
echo "## linear_train, $GPU, $(date -u +%F)"
echo "tests:$TESTS"
echo
echo "Forward + backward (x, W, b) of one layer, n = 2048 tokens, f32 with TF32 products; medians of 30."
echo "Ours: wall time with a device sync per run; torch: CUDA events. Floor: 6 n d_in d_out flops at 494 TFLOP/s."
echo
echo "| d_in | d_out | act | floor ms | linear_train ms | candle composed ms | torch ms | fwd only: ours / composed / torch ms |"
echo "|---|---|---|---|---|---|---|---|"
paste -d'|' <(grep -E '^\| cuda' "$LOG/ours.md") <(grep -E 'TF32 \|' "$LOG/torch.md") |
  awk -F'|' '{gsub(/ /,""); printf "| %s | %s | %s | %s | %s | %s | %s | %s / %s / %s |\n", $4, $5, $6, $7, $8, $9, $19, $10, $11, $20}'
