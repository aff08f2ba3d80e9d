#!/usr/bin/env bash
# GPU side of the half-precision inputs against their peers, in one device call of < 10 min, from the
# repository root with .devbin/pkrows (bench/profk_rows_pack.sh) and .devbin/topk_peers.xz carried:
#   bash bench/profk_half_peers.sh
# The shared CUDA test bodies and every selector against the CPU path, then Prof-K, FlashInfer
# (deterministic and not), CUB DeviceTopK and torch.topk on the batched, masked and flat shapes in f16,
# and on the flat shape in bf16 (the bf16 rows have their tables already), in the same call.
. bench/lib.sh
profk_begin bench/profk_half_peers.sh half
profk_checks "$B"
for group in "f16 rows" "f16 single" "bf16 single"; do
  date -u >>"$R"
  # shellcheck disable=SC2086 # the group is two words: element type and shapes
  LIMIT=30 section "bench/topk_peers.sh $group" 240 bash bench/topk_peers.sh $group
done
date -u >>"$R"
