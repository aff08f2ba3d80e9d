#!/usr/bin/env bash
# Builds and packs, stripped and xz'd, the CUDA builds that bench/attention_train_final.sh runs into
# .devbin/attn/ (git-ignored). Run from the repo root:
#   bash bench/attention_train_pack.sh
set -euo pipefail
. bench/pack.sh
pack .devbin/attn "-p gpt2 -p activations --test train_attention --example attention_train_bench" \
  gpt2/train_attention activations/attention_train_bench
