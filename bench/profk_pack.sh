#!/usr/bin/env bash
# Builds the CUDA binaries that bench/profk_final.sh runs and packs them, stripped and xz'd, into
# .devbin/pk/ (run here, on the machine without a GPU, from the repository root):
#   bash bench/profk_pack.sh
set -euo pipefail
ROOT=$(pwd)
DEST=$ROOT/.devbin/pk
mkdir -p "$DEST"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/work/main/target-gpu}
GPU_CARGO=${GPU_CARGO:-/work/shared/gpu/gpu-cargo.sh}
# Executables by (target name, is a test): profk's CUDA tests, the profk CLI, the EF benchmark.
"$GPU_CARGO" build --release -p profk -p gradsparse --features cuda --bins --tests --message-format=json |
  python3 -c '
import json, sys
want = {("selection", True): "selection", ("accumulate", True): "accumulate",
        ("statistics", True): "statistics", ("profk", False): "profk",
        ("finetune-bench", False): "finetune-bench"}
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        name = want.get((m["target"]["name"], m["profile"]["test"]))
        if name:
            print(name, m["executable"])
' | while read -r name exe; do
  strip -o "$DEST/$name" "$exe"
  xz -9 -T2 -f "$DEST/$name"
  echo "packed $DEST/$name.xz ($(du -h "$DEST/$name.xz" | cut -f1))"
done
