#!/usr/bin/env bash
# The data path on the GPU machine, from the repo root, as a user runs it: `extract` GPT-2 XL (random
# weights) to layer 24 in bf16 onto the local disk, then whole `train-sae` runs from those shards and on the
# fly, BatchTopK and Matryoshka at (n, B) in {(2^16, 4096), (2^17, 8192)}, d = 1600, k = 32, TF32, and the
# crosscoder over layers 12/24/36. Each run's whole-run tokens/s (tokens / wall seconds of the command, and
# from the loop's start), stall-free step ms and data-wait share come from its metrics.jsonl
# (bench/data_path.py prints the table). Binaries: .devbin/data_path/*.xz (bench/pack.sh data_path).
#   DP_TOKENS   tokens to extract (default 5242880 = 20 shards of 262144)
#   DP_PACK     the packed binaries (default .devbin/data_path)
#   DP_ONLY     a space-separated subset of: extract warm shards (or one of shards-16 shards-17) profile otf
#               matryoshka crosscoder mixing
#   DP_STEPS_16 / DP_STEPS_17 / DP_STEPS_OTF   steps of the (2^16, 4096) and (2^17, 8192) runs from shards and
#               of the on-the-fly run (default 20000 / 6000 / 3000: long enough that start-up and the final
#               checkpoint weigh as little as in a real run, which is 50000 steps in configs/gpt2xl.toml)
#   DP_CHECKPOINT_EVERY  periodic checkpoints, as in configs/gpt2xl.toml (default 2000)
# `profile` is the (2^16, 4096) shards run again with train.profile_stages (stage times, synchronized);
# `mixing` is the shuffle-quality measurement on the tiny config (bench/mixing.sh).
set -uo pipefail
export CUDA_CACHE_MAXSIZE=${CUDA_CACHE_MAXSIZE:-4294967296}
OUT=${OUT:-/tmp/out}
LOG=$OUT/data
BIN=/tmp/dp-bin
WORK=${DP_WORK:-/tmp/dp}
TOKENS=${DP_TOKENS:-5242880}
ONLY=${DP_ONLY:-extract shards profile otf matryoshka crosscoder mixing}
mkdir -p "$LOG" "$WORK"
. bench/lib.sh
export SAE_CHECKPOINT_EVERY=${DP_CHECKPOINT_EVERY:-2000}
unpack "${DP_PACK:-.devbin/data_path}" "$BIN"
want() { [[ " $ONLY " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$LOG/device.txt" 2>&1
nproc >>"$LOG/device.txt"; df -h "$WORK" >>"$LOG/device.txt"

# timed NAME COMMAND...: runs it, appends "NAME wall_s rc" to $LOG/walls.txt.
timed() {
  local name=$1 t0 t1 rc
  shift
  t0=$(date +%s.%N)
  timeout 560 "$@" >"$LOG/$name.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  echo "$name $(awk "BEGIN { print $t1 - $t0 }") $rc" >>"$LOG/walls.txt"
}

"$BIN/hash_rate" 1024 >"$LOG/hash_rate.md" 2>&1
if want extract; then
  rm -rf "$WORK/shards"
  cat >"$WORK/extract.toml" <<TOML
model = "random:xl"
model_dtype = "bf16"
device = "cuda"
out_dir = "$WORK/shards"
hook_points = ["blocks.24.hook_resid_pre"]
dtype = "bf16"
tokens_per_shard = 262144
batch_contexts = 16
writer_threads = 4
[data]
corpus = "default"
split = "train"
context = 1024
max_tokens = $TOKENS
repeat = true
TOML
  timed extract "$BIN/extract" "$WORK/extract.toml"
  du -sh "$WORK/shards" >>"$LOG/device.txt"
fi

SHARDS="source = \"shards\"
dir = \"$WORK/shards\"
buffer_tokens = 262144"
OTF="source = \"model\"
model = \"random:xl\"
hook = \"resid_pre\"
layers = [24]
context = 1024
dtype = \"bf16\"
buffer_tokens = 262144"
XOTF="source = \"model\"
model = \"random:xl\"
hook = \"resid_pre\"
layers = [12, 24, 36]
context = 1024
dtype = \"bf16\"
buffer_tokens = 131072"
train() { # NAME SOURCE ARCH N B STEPS [EXTRA-TRAIN-KEY]
  sae_config "$@"
  [ -n "${7:-}" ] && sed -i "/^\[train\]/a $7" "$WORK/$1.toml"
  timed "$1" "$BIN/train-sae" "$WORK/$1.toml" --out "$WORK/runs/$1"
  cp "$WORK/runs/$1/metrics.jsonl" "$LOG/$1.metrics.jsonl" 2>/dev/null
  rm -rf "$WORK/runs/$1" # checkpoints of GB each: the local disk holds the shards and one run
}
BTK='arch = "batchtopk"'
MAT16='arch = "matryoshka"
group_sizes = [2048, 4096, 8192, 51200]'
MAT17='arch = "matryoshka"
group_sizes = [4096, 8192, 16384, 102400]'
if want warm; then
  # A short run first, so that the driver's JIT cache holds candle's kernels (PTX) for the runs after it,
  # as on any machine that has run train-sae before: the start-up of the runs after it is then their own.
  train warm-16 "$SHARDS" "$BTK" 65536 4096 300
fi
if want shards || want shards-16; then
  train shards-16 "$SHARDS" "$BTK" 65536 4096 "${DP_STEPS_16:-20000}"
fi
if want shards || want shards-17; then
  train shards-17 "$SHARDS" "$BTK" 131072 8192 "${DP_STEPS_17:-6000}"
fi
if want profile; then
  train profile-16 "$SHARDS" "$BTK" 65536 4096 300 "profile_stages = true"
fi
if want otf; then
  train otf-16 "$OTF" "$BTK" 65536 4096 "${DP_STEPS_OTF:-3000}"
fi
if want matryoshka; then
  train mat-16 "$SHARDS" "$MAT16" 65536 4096 700
  train mat-17 "$SHARDS" "$MAT17" 131072 8192 400
fi
if want crosscoder; then
  train xc-16 "$XOTF" 'arch = "crosscoder"' 65536 4096 300
fi
python3 bench/data_path.py "$LOG" "$TOKENS" | tee "$LOG/table.md"
if want mixing; then
  MIX_BIN=$BIN MIX_WORK=$WORK/mixing MIX_LOG=$LOG/mixing DEVICE=cuda bash bench/mixing.sh | tee "$LOG/mixing.md"
fi
