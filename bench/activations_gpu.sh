#!/usr/bin/env bash
# Extraction tokens/s on the GPU for a GPT-2-XL-shaped random model, beside HF transformers.
# Runs on the GPU machine with a stripped CUDA build of `extract` at .devbin/extract.xz:
#   CARGO_TARGET_DIR=target-gpu ../shared/gpu/gpu-cargo.sh build --release -p activations --features cuda --bin extract
#   mkdir -p .devbin && strip -o .devbin/extract target-gpu/release/extract && xz -f -T2 .devbin/extract
#   bash bench/activations_gpu.sh   (on the GPU machine)
# Shards are written (and deleted after each run) under ${SCRATCH:-/tmp/act-bench}.
set -uo pipefail
BIN=/tmp/extract
xz -dc .devbin/extract.xz > "$BIN" && chmod +x "$BIN"
SCRATCH=${SCRATCH:-/tmp/act-bench}
mkdir -p "$SCRATCH"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
run() { # dtype hook tokens chunk label [tf32]
  local cfg="$SCRATCH/cfg.toml" out="$SCRATCH/out"
  cat > "$cfg" <<TOML
model = "random:xl"
model_dtype = "$1"
device = "cuda"
out_dir = "$out"
hook_points = ["$2"]
dtype = "$1"
tokens_per_shard = 262144
batch_contexts = 16
drop_bos = true
attention_chunk = $4
allow_tf32 = ${6:-false}
writer_threads = 4
[corpus]
path = "default"
context_len = 1024
max_tokens = $3
repeat = true
TOML
  local line
  if ! line=$("$BIN" "$cfg" --quiet 2>"$SCRATCH/err" | tail -1) || [ -z "$line" ]; then
    echo "| extract $5 | $1 | $2 | FAILED: $(tail -3 "$SCRATCH/err" | tr '\n' ' ') |"
    rm -rf "$out"; return
  fi
  local rate
  rate=$(echo "$line" | sed -E 's/.*: ([0-9]+) tokens\/s.*/\1/')
  printf '| extract (candle) %s | gpt2-xl random | %s | %s | 16 x 1024 | %.3g |\n' "$5" "$1" "$2" "$rate"
  rm -rf "$out"
}
echo "| tool | model | dtype | hook | batch x ctx | tokens/s (shards written) |"
echo "|---|---|---|---|---|---|"
run bf16 blocks.24.hook_resid_pre 1572864 256 "chunk 256"
run bf16 blocks.24.hook_resid_pre 1048576 0 "no chunking"
run bf16 ln_final 786432 256 "chunk 256"
run f32 blocks.24.hook_resid_pre 524288 256 "chunk 256"
run f32 blocks.24.hook_resid_pre 524288 256 "chunk 256, TF32" true
run f32 ln_final 262144 256 "chunk 256"
run f32 ln_final 262144 256 "chunk 256, TF32" true
line=$("$BIN" configs/tiny-extract.toml --out "$SCRATCH/tiny" --quiet | tail -1)
echo "| extract (candle), CPU of the GPU machine | tiny (4 x 128), hook blocks.2 | f32 | $line |"
rm -rf "$SCRATCH/tiny"
python3 bench/peers/hf_extract.py --size xl --batch 16 --ctx 1024 --layers 24 48 --dtypes bf16 f32
