#!/usr/bin/env bash
# Final GPU check of extraction: the CUDA tests of the gpt2 crate (fused attention and linear kernels
# against float64 references and against the CPU forward), then extraction tokens/s for a
# GPT-2-XL-shaped random model (batch 16 x 1024, BOS dropped, shards written to RAM) beside
# HF transformers (sdpa, same shapes, activations copied to host) in the same call, and the
# forward pass alone with per-op times (forward_bench). About 2 min.
#
# Binaries (built on the development machine, from the repo root):
#   bash bench/pack.sh activations     # builds, strips + xz's extract, forward_bench, gpt2_it (gpt2's ops tests among them), gpt2, it (the activations tests) into .devbin/activations/
# Run on the GPU machine from the repo root: bash bench/activations.sh  (logs: $OUT/activations/)
# A subset: ACT_BIN=.devbin/act2 ACT_TESTS="ops" ACT_RUNS="f32_24" bash bench/activations.sh
set -uo pipefail
. bench/lib.sh
begin activations "${ACT_BIN:-.devbin/activations}"
SCRATCH=/dev/shm/act-final; mkdir -p "$SCRATCH"
for t in ${ACT_TESTS:-ops gpt2}; do
  # gpt2's whole forwards are a test binary of their own; the other names are modules of gpt2_it.
  # shellcheck disable=SC2046 # one word per test name
  if [ "$t" = gpt2 ]; then run_test gpt2 60 "$B/gpt2" --test-threads 4
  else run_test "$t" 60 "$B/gpt2_it" --test-threads 4 --exact $(module_tests "$B/gpt2_it" "$t"); fi
done
extract() { # dtype hook tokens -> tokens/s
  cat > "$SCRATCH/cfg.toml" <<TOML
model = "random:xl"
model_dtype = "$1"
device = "cuda"
out_dir = "$SCRATCH/out"
hook_points = ["$2"]
dtype = "$1"
tokens_per_shard = 131072
batch_contexts = 16
drop_bos = true
writer_threads = 4
[data]
corpus = "default"
context = 1024
max_tokens = $3
repeat = true
TOML
  local line
  line=$(timeout 60 "$B/extract" "$SCRATCH/cfg.toml" --quiet 2>>"$LOG/extract.err" | tail -1)
  echo "$1 $2: $line" >> "$LOG/extract.log"
  rm -rf "$SCRATCH/out"
  echo "$line" | sed -nE 's/.*: ([0-9]+) tokens\/s.*/\1/p'
}
RUNS=" ${ACT_RUNS:-bf16_24 bf16_48 f32_24} "
bf16_24="" bf16_48="" f32_24="" fwd=""
: > "$LOG/hf.log"
if [[ $RUNS == *" bf16_24 "* ]]; then bf16_24=$(extract bf16 blocks.24.hook_resid_pre 2097152); fi
if [[ $RUNS == *" bf16_48 "* ]]; then bf16_48=$(extract bf16 ln_final 1048576); fi
if [[ $RUNS == *" f32_24 "* ]]; then f32_24=$(extract f32 blocks.24.hook_resid_pre 524288); fi
if [[ $RUNS == *" bf16_"* ]]; then
  timeout 40 "$B/forward_bench" --device cuda --dtype bf16 --depth 24 --iters 2 > "$LOG/forward_bench.md" 2>&1
  fwd=$(grep -F "fused kernels" "$LOG/forward_bench.md" | awk -F'|' '{gsub(/ /,"",$5); print $5}')
fi
rm -rf "$SCRATCH"
if [[ $RUNS == *" bf16_"* ]]; then
  timeout 100 python3 bench/peers/hf_extract.py --size xl --batch 16 --ctx 1024 --layers 24 48 --dtypes bf16 --iters 5 >> "$LOG/hf.log" 2>&1
fi
if [[ $RUNS == *" f32_24 "* ]]; then
  timeout 60 python3 bench/peers/hf_extract.py --size xl --batch 16 --ctx 1024 --layers 24 --dtypes f32 --iters 3 >> "$LOG/hf.log" 2>&1
fi
hf() { grep -F "| $1 | $2 |" "$LOG/hf.log" | head -1 | awk -F'|' '{gsub(/ /,"",$7); print $7}'; }
ratio() { python3 -c "import sys; a,b=sys.argv[1:]; print(f'{float(a)/float(b):.2f}x' if a and b else '-')" "$1" "$2" 2>/dev/null || echo -; }
fmt() { [ -n "$1" ] && python3 -c "print(f'{float(\"$1\"):.3g}')" || echo FAILED; }
echo "## activations: GPT-2 XL extraction, $GPU, $(date -u +%F)"
echo "CUDA tests:$TESTS"
echo "| model (random weights) | dtype | depth | batch x ctx | extract (candle + fused kernels, shards written) tokens/s | HF transformers (sdpa, copy to host) tokens/s | ours / HF |"
echo "|---|---|---|---|---|---|---|"
echo "| gpt2-xl | bf16 | 24 blocks (blocks.24.hook_resid_pre) | 16 x 1024 | $(fmt "$bf16_24") | $(fmt "$(hf bf16 24)") | $(ratio "$bf16_24" "$(hf bf16 24)") |"
echo "| gpt2-xl | bf16 | 48 blocks (ln_final) | 16 x 1024 | $(fmt "$bf16_48") | $(fmt "$(hf bf16 48)") | $(ratio "$bf16_48" "$(hf bf16 48)") |"
echo "| gpt2-xl | f32 (no TF32) | 24 blocks | 16 x 1024 | $(fmt "$f32_24") | $(fmt "$(hf f32 24)") | $(ratio "$f32_24" "$(hf f32 24)") |"
echo "forward pass alone (no copy, no shards), bf16 to layer 24: $(fmt "$fwd") tokens/s; per-op times in \$OUT/activations/forward_bench.md"
echo "shards: 131072 tokens each (419 MB bf16, 839 MB f32), written to /dev/shm; rates include the first batch's warm-up and the last shard's write"
fails=$(grep -h -A1 "panicked at" "$LOG"/test-*.log 2>/dev/null | grep -v "^--$" | head -4 | tr '\n' ' ')
[ -n "$fails" ] && echo "test failures: $fails"
[ -s "$LOG/extract.err" ] && echo "extract stderr (last lines): $(tail -3 "$LOG/extract.err" | tr '\n' ' ')"
echo "target: >= 2.2e5 tokens/s for bf16 to layer 24 and no slower than HF; logs in \$OUT/activations/"
