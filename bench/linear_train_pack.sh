#!/usr/bin/env bash
# Strips and xz's the CUDA builds that bench/linear_train_final.sh runs into .devbin/lin/
# (git-ignored): the train_linear and ops test binaries and the linear_train_bench example.
# Run from the repo root; it builds first (seconds when up to date):
#   bash bench/linear_train_pack.sh
set -euo pipefail
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target-gpu}
mkdir -p .devbin/lin
"${GPU_CARGO:-../shared/gpu/gpu-cargo.sh}" build --release -p activations --features cuda --tests --examples \
  --message-format=json 2>/dev/null |
  python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and \
            m["target"]["name"] in ("ops", "train_linear", "linear_train_bench"):
        print(m["target"]["name"], m["executable"])
' | while read -r name src; do
  strip -o "/tmp/$name.stripped" "$src"
  xz -T2 -6 -c "/tmp/$name.stripped" > ".devbin/lin/$name.xz"
  rm -f "/tmp/$name.stripped"
done
ls -la .devbin/lin
