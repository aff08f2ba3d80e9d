#!/usr/bin/env bash
# GPU side of gradsparse in one device call (< 150 s): the CUDA tests of profk::topk_accumulate (the
# residual update fused into Prof-K's pass) and of the error-feedback step, the CPU/CUDA parity run,
# then the GPT-2 XL error-feedback overhead (residual update, selection, sparse AdamW apply) per
# selector on random gradients, beside PyTorch (residual add + abs, torch.topk, sparse apply) in the
# same call, and PyTorch's streams over the same N (the pass's ceiling). Runs from the repository
# root on the GPU machine with the stripped, xz'd CUDA builds in .devbin/gradsparse/, made by
# `bash bench/pack.sh gradsparse`.
# Logs go to $OUT/gradsparse/.
#   bash bench/gradsparse.sh            # tests, XL overhead and whole Medium/XL steps, each beside PyTorch
#   FULL=0 bash bench/gradsparse.sh     # without the whole steps (forward + backward)
set -uo pipefail
. bench/lib.sh
begin gradsparse .devbin/gradsparse
# shellcheck disable=SC2046 # one word per test name
step "profk accumulate tests (cpu + cuda)" 60 accumulate-tests "$B/profk_it" --exact $(module_tests "$B/profk_it" accumulate)
# shellcheck disable=SC2046
step "profk selection tests (cuda)" 45 selection-tests "$B/profk_it" --exact $(module_tests "$B/profk_it" selection cuda)
step "gradsparse fused vs separate EF (cpu + cuda)" 30 gradsparse-lib "$B/gradsparse_lib" feedback
step "finetune-bench --check (tiny model, cpu vs cuda)" 40 check "$B/finetune-bench" --check --ef-only --models gpt2 --selectors profk --steps 2 --warmup 1
step "XL EF overhead, gradsparse" 80 ef-xl "$B/finetune-bench" --ef-only --models gpt2-xl --selectors profk,radix,sort --steps 7 --warmup 2
step "XL EF overhead, PyTorch peer" 70 ef-xl-torch python3 bench/peers/torch_ef_step.py --ef-only --models xl --steps 7 --warmup 2
step "streaming ceilings, PyTorch" 15 ceiling python3 bench/peers/torch_stream_ceiling.py
if [ "${FULL:-1}" = 1 ]; then
  step "Medium and XL whole steps, gradsparse" 150 step-xl "$B/finetune-bench" --models gpt2-medium,gpt2-xl --selectors profk,radix,sort --steps 5 --warmup 2
  step "Medium and XL whole steps, PyTorch peer" 90 step-xl-torch python3 bench/peers/torch_ef_step.py --models medium,xl --steps 5 --warmup 2
fi

echo "## gradsparse on $GPU ($(date -u +%F\ %H:%M) UTC), total $((SECONDS - START)) s"
echo "| run | result | time | tests |"
echo "|---|---|---|---|"
printf '%s\n' "${SUMMARY[@]}"
grep -h "check cpu vs" "$LOG/check.log" || true
echo
echo "### GPT-2 XL error-feedback overhead, f32, N = 1 557 611 200, k = 0.1 % (ms, medians; ours vs PyTorch, same call)"
grep -h '^# ' "$LOG/ef-xl.log" "$LOG/ef-xl-torch.log" || true
ef_overhead_table "$LOG/ef-xl.log" "$LOG/ef-xl-torch.log"
echo
echo "### The pass's ceiling: PyTorch streams over the same N, same call"
grep -h '^| ' "$LOG/ceiling.log" || tail -3 "$LOG/ceiling.log"
if [ "${FULL:-1}" = 1 ]; then
  echo
  echo "### GPT-2 Medium and XL whole steps, random weights, batch 4 x 512, TF32 matmuls, global top-0.1 % (ms, medians of 5 after 2)"
  grep -h '^| ' "$LOG/step-xl.log" | head -2
  grep -h '^| gradsparse' "$LOG/step-xl.log" || tail -3 "$LOG/step-xl.log"
  grep -h '^| torch' "$LOG/step-xl-torch.log" || tail -3 "$LOG/step-xl-torch.log"
fi
