#!/usr/bin/env bash
# A longer training of the default tiny GPT-2 on a GPU, and what an SAE makes of it: `finetune
# configs/tiny-model-recipe.toml --install-default` with TINY_STEPS steps of TINY_BATCH contexts (the shipped
# model had 500 of 32), installed into a scratch cache; the residual-stream statistics of layer 2
# (resid_stats); then the README's tiny SAE run on that model (held-out FVU, L0, dead fraction, CE-loss
# recovered); and the model packed the way the shipped one is (pack_tiny) into
# $OUT/tiny/tiny-gpt2.safetensors.zst. From the repo root, with the binaries in TINY_BIN (finetune,
# train-sae, resid_stats, pack_tiny).
set -uo pipefail
BIN=${TINY_BIN:-target/release}
OUT=${OUT:-/tmp/out}
NAME=${TINY_NAME:-tiny}
LOG=$OUT/$NAME
STEPS=${TINY_STEPS:-1500}
BATCH=${TINY_BATCH:-64}
DEVICE=${DEVICE:-cuda}
export SPARSETRAIN_CACHE=${TINY_CACHE:-/tmp/tiny-cache}
mkdir -p "$LOG"
rm -rf "$SPARSETRAIN_CACHE/models/tiny-gpt2" "/tmp/tiny-runs/$NAME"
t0=$SECONDS
timeout 100 "$BIN/finetune" configs/tiny-model-recipe.toml --install-default --set device="$DEVICE" --set train.steps="$STEPS" \
  --set train.batch_size="$BATCH" --set train.warmup_steps=100 --set train.checkpoint_every=0 \
  --set train.eval_every="${TINY_EVAL_EVERY:-0}" --set log.every=50 --set log.progress=false \
  --out "/tmp/tiny-runs/$NAME/finetune" >"$LOG/finetune.log" 2>&1
echo "finetune rc=$? in $((SECONDS - t0)) s" | tee "$LOG/summary.txt"
grep -h '"eval' "/tmp/tiny-runs/$NAME/finetune/metrics.jsonl" 2>/dev/null | tail -1 >>"$LOG/summary.txt"
cp "/tmp/tiny-runs/$NAME/finetune/metrics.jsonl" "$LOG/finetune.metrics.jsonl" 2>/dev/null
timeout 60 "$BIN/train-sae" configs/tiny.toml --set device="$DEVICE" --set log.progress=false \
  --out "/tmp/tiny-runs/$NAME/sae" >"$LOG/sae.log" 2>&1
echo "train-sae rc=$?" >>"$LOG/summary.txt"
grep -h '"kind":"eval"' "/tmp/tiny-runs/$NAME/sae/metrics.jsonl" 2>/dev/null | tail -1 >>"$LOG/summary.txt"
# The trained model itself (config.json + model.safetensors, f32), to pack here with pack_tiny if it is
# the better default; in parts that fit what a device call returns.
tar cf - -C "$SPARSETRAIN_CACHE/models" tiny-gpt2 | xz -6 -T0 | split -b 15M - "$LOG/model.tar.xz."
timeout 30 "$BIN/resid_stats" --model tiny --layer 2 >"$LOG/resid_stats.md" 2>&1
tail -20 "$LOG/resid_stats.md" >>"$LOG/summary.txt"
timeout 30 "$BIN/pack_tiny" "$SPARSETRAIN_CACHE/models/tiny-gpt2" "$LOG/tiny-gpt2.safetensors.zst" \
  >>"$LOG/summary.txt" 2>&1
cat "$LOG/summary.txt"
