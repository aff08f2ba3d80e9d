#!/usr/bin/env bash
# Extraction tokens/s on the GPU for a GPT-2-XL-shaped random model, beside HF transformers,
# plus the crate's tests on CUDA and per-op timings. Runs on the GPU machine with stripped CUDA
# builds at .devbin/act/{extract,forward_bench,gpt2,shards,ops}.xz:
#   bash bench/activations_pack.sh     # builds and packs them
# then on the GPU machine: bash bench/activations_gpu.sh
# Shards go to RAM (${SCRATCH:-/dev/shm/act-bench}) unless a run names a disk directory.
set -uo pipefail
. bench/lib.sh
B=/tmp/actbin; unpack .devbin/act "$B"
SCRATCH=${SCRATCH:-/dev/shm/act-bench}
mkdir -p "$SCRATCH"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
echo "## tests on CUDA"
(cd activations && "$B/gpt2" 2>&1 | tail -3 && "$B/shards" 2>&1 | tail -3)
echo "## disk write bandwidth (1 GiB, fsync)"
dd if=/dev/zero of=/tmp/dd.bin bs=16M count=64 conv=fsync 2>&1 | tail -1; rm -f /tmp/dd.bin
echo "## per-op timings"
"$B/forward_bench" --device cuda --dtype bf16 --depth 24 --iters 3
"$B/forward_bench" --device cuda --dtype f32 --depth 24 --iters 3 | grep forward
run() { # dtype hook tokens chunk label tf32 out_root
  local cfg="$SCRATCH/cfg.toml" out="${7:-$SCRATCH}/out"
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
allow_tf32 = $6
writer_threads = 4
[data]
corpus = "default"
context = 1024
max_tokens = $3
repeat = true
TOML
  local line
  if ! line=$("$B/extract" "$cfg" --quiet 2>"$SCRATCH/err" | tail -1) || [ -z "$line" ]; then
    echo "| extract $5 | $1 | $2 | FAILED: $(tail -3 "$SCRATCH/err" | tr '\n' ' ') |"
    rm -rf "$out"; return
  fi
  local rate
  rate=$(echo "$line" | sed -E 's/.*: ([0-9]+) tokens\/s.*/\1/')
  printf '| extract (candle) %s | gpt2-xl random | %s | %s | 16 x 1024 | %.3g |\n' "$5" "$1" "$2" "$rate"
  rm -rf "$out"
}
echo "## extraction (shards written)"
echo "| tool | model | dtype | hook | batch x ctx | tokens/s |"
echo "|---|---|---|---|---|---|"
run bf16 blocks.24.hook_resid_pre 1048576 256 "chunk 256, shards in RAM" false
run bf16 blocks.24.hook_resid_pre 1048576 256 "chunk 256, shards on disk" false /tmp
run bf16 blocks.24.hook_resid_pre 524288 0 "no chunking, shards in RAM" false
run bf16 ln_final 524288 256 "chunk 256, shards in RAM" false
run f32 blocks.24.hook_resid_pre 262144 256 "chunk 256, shards in RAM" false
run f32 blocks.24.hook_resid_pre 262144 256 "chunk 256, TF32, shards in RAM" true
run f32 ln_final 262144 256 "chunk 256, TF32, shards in RAM" true
line=$("$B/extract" configs/tiny-extract.toml --out "$SCRATCH/tiny" --quiet | tail -1)
echo "| extract (candle), 16 CPU cores of the GPU machine | tiny (4 x 128), hook blocks.2 | f32 | $line |"
rm -rf "$SCRATCH"
python3 bench/peers/hf_extract.py --size xl --batch 16 --ctx 1024 --layers 24 48 --dtypes bf16 f32 --iters 5
