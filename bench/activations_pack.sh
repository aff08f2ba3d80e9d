#!/usr/bin/env bash
# Strips and xz's the CUDA builds that bench/activations_final.sh and bench/activations_gpu.sh run
# into .devbin/act/ (git-ignored). Build first, from the repo root:
#   CARGO_TARGET_DIR=target-gpu ../shared/gpu/gpu-cargo.sh build --release -p activations --features cuda --bins --tests --examples
set -euo pipefail
T=${CARGO_TARGET_DIR:-target-gpu}/release
mkdir -p .devbin/act
newest() { ls -t "$T"/deps/"$1"-[0-9a-f]* 2>/dev/null | grep -v '\.d$' | head -1; }
for pair in "extract:$T/extract" "forward_bench:$T/examples/forward_bench" "ops:$(newest ops)" "gpt2:$(newest gpt2)" "shards:$(newest shards)"; do
  name=${pair%%:*} src=${pair#*:}
  [ -x "$src" ] || { echo "missing build of $name ($src)" >&2; exit 1; }
  strip -o "/tmp/$name.stripped" "$src"
  xz -T2 -6 -c "/tmp/$name.stripped" > ".devbin/act/$name.xz"
  rm -f "/tmp/$name.stripped"
done
ls -la .devbin/act
