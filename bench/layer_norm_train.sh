#!/usr/bin/env bash
# GPU check of the training layer norm (gpt2::ops::layer_norm_train): its CUDA tests (output
# and the three gradients against float64 references, reproducible gradients, clear errors), then
# forward and forward + backward at 2048 rows x d 1024 / 1600 (f32 and bf16) beside candle's
# composed ops and torch.nn.functional.layer_norm in the same call. About 40 s; the table prints device, shape, dtype, ours, candle composed and torch.
#
# Binaries (built on the development machine, from the repo root): bash bench/pack.sh layer_norm_train
# Run on the GPU machine from the repo root: bash bench/layer_norm_train.sh  (logs: $OUT/layer_norm/)
set -uo pipefail
. bench/lib.sh
begin layer_norm "${LN_BIN:-.devbin/layer_norm_train}"
# shellcheck disable=SC2046 # one word per test name
run_test train_layer_norm 60 "$B/gpt2_it" --test-threads 1 --nocapture \
  --exact $(module_tests "$B/gpt2_it" train_layer_norm)
for dt in f32 bf16; do
  timeout 30 "$B/layer_norm_train_bench" --device cuda --dtype $dt > "$LOG/ours-$dt.md" 2> "$LOG/ours-$dt.err"
  timeout 30 python3 bench/peers/layer_norm_train_torch.py --dtype $dt > "$LOG/torch-$dt.md" 2> "$LOG/torch-$dt.err"
done
echo "== layer_norm_train on $GPU, $(date -u +%F)"
echo "tests:$TESTS   (errors per case: grep Cuda $LOG/test-train_layer_norm.log)"
grep -E "Cuda.*(3000|1600|special true|BF16)" "$LOG/test-train_layer_norm.log" | head -6
echo "-- ours vs candle composed, ms per call (median of 10 rounds of 20 calls back to back, wall clock; fwd+bwd = y.backward(), seed ones, incl. candle's gradient bookkeeping, shown alone in the last row of each shape)"
for dt in f32 bf16; do cat "$LOG/ours-$dt.md" | grep -v '^|---' | { [ $dt = f32 ] && cat || tail -n +2; }; done
echo "-- torch.nn.functional.layer_norm, ms per call (median of 10 rounds of 20 calls back to back, CUDA events; y.backward(ones))"
for dt in f32 bf16; do cat "$LOG/torch-$dt.md" | grep -v '^|---' | { [ $dt = f32 ] && cat || tail -n +2; }; done
