#!/usr/bin/env bash
# Strips and xz's the CUDA builds that bench/attention_train_final.sh runs into .devbin/attn/
# (git-ignored). Build first, from the repo root:
#   CARGO_TARGET_DIR=target-gpu ../shared/gpu/gpu-cargo.sh build --release -p activations --features cuda --test train_attention --example attention_train_bench
set -euo pipefail
T=${CARGO_TARGET_DIR:-target-gpu}/release
mkdir -p .devbin/attn
tests=$(ls -t "$T"/deps/train_attention-[0-9a-f]* 2>/dev/null | grep -v '\.d$' | head -1)
for pair in "train_attention:$tests" "attention_train_bench:$T/examples/attention_train_bench"; do
  name=${pair%%:*} src=${pair#*:}
  [ -x "$src" ] || { echo "missing build of $name ($src)" >&2; exit 1; }
  strip -o "/tmp/$name.stripped" "$src"
  xz -T2 -6 -c "/tmp/$name.stripped" > ".devbin/attn/$name.xz"
  rm -f "/tmp/$name.stripped"
done
ls -la .devbin/attn
