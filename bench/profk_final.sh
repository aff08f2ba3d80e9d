#!/usr/bin/env bash
# GPU side of Prof-K in one device call (< 90 s): the CUDA tests of the selector and of the fused
# accumulation, the target rows (2^30, and the SAE's flat 4096x2^16 -> 131072 and 8192x2^17 -> 262144
# selections) beside torch.topk, and the GPT-2 XL error-feedback overhead beside PyTorch, all in the
# same call. Runs from the repository root on the GPU machine with the stripped, xz'd CUDA builds in
# .devbin/pk/ (profk, selection, accumulate, statistics, finetune-bench; see docs/perf/profk-cuda.md,
# "Reproduce"). Logs go to $OUT/profk/.
set -uo pipefail
. bench/lib.sh
begin profk .devbin/pk
step "profk selection tests (cuda)" 20 selection "$B/selection" cuda
step "profk accumulate tests (cpu + cuda)" 15 accumulate "$B/accumulate"
step "profk statistics test (cuda)" 10 statistics "$B/statistics" cuda
step "Prof-K target rows" 15 targets "$B/profk" bench --device cuda --targets
step "torch.topk, same rows" 15 targets-torch python3 bench/peers/torch_topk.py --targets
step "EF steps, CPU vs CUDA (tiny model, fused apply)" 25 check "$B/finetune-bench" --check --ef-only --models gpt2 --selectors profk --steps 2 --warmup 1
step "XL EF overhead, gradsparse" 25 ef-xl "$B/finetune-bench" --ef-only --models gpt2-xl --selectors profk --steps 7 --warmup 2
step "XL EF overhead, PyTorch" 25 ef-xl-torch python3 bench/peers/torch_ef_step.py --ef-only --models xl --steps 7 --warmup 2
step "streaming ceilings, PyTorch" 15 ceiling python3 bench/peers/torch_stream_ceiling.py

echo "## Prof-K on $GPU ($(date -u +%F\ %H:%M) UTC), total $((SECONDS - START)) s"
echo "| run | result | time | tests |"
echo "|---|---|---|---|"
printf '%s\n' "${SUMMARY[@]}"
grep -h "check cpu vs" "$LOG/check.log" || true
echo
echo "### Target rows, f32 standard normal, CUDA-event medians (ms); floor = one read at 4.41 TB/s"
grep -h '^|' "$LOG/targets.log" || tail -3 "$LOG/targets.log"
echo "torch.topk (same shapes, same call; flat rows on the reshaped 1-D tensor):"
grep -h '^| ' "$LOG/targets-torch.log" | grep -v '^| shape\|^|---' || tail -3 "$LOG/targets-torch.log"
echo
echo "### GPT-2 XL error-feedback overhead, f32, N = 1 557 611 200, k = 0.1 % (ms, medians of 7; ours vs PyTorch)"
ef_overhead_table "$LOG/ef-xl.log" "$LOG/ef-xl-torch.log"
echo
echo "### The pass's ceiling: PyTorch streams over the same N, same call"
grep -h '^| ' "$LOG/ceiling.log" || tail -3 "$LOG/ceiling.log"
