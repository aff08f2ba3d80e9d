#!/usr/bin/env bash
# Builds and packs, stripped and xz'd, what bench/data_path.sh runs into .devbin/data/ (git-ignored):
# train-sae, extract, and the CUDA runs of the data-path tests. From the repo root:
#   bash bench/data_path_pack.sh
set -euo pipefail
. bench/pack.sh
pack .devbin/data "-p sparsetrain -p activations -p sae --bins --tests --examples" \
  sparsetrain/train-sae activations/extract activations/hash_rate activations/shards activations/prefetch \
  sae/shard_stream
