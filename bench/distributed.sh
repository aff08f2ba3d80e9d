#!/usr/bin/env bash
# Distributed training at world size 1 on one GPU, from the repo root of the GPU machine:
# 1. `train-sae` plain against `[distributed] mode = "data"` through real NCCL (rank 0 of 1), BatchTopK,
#    (n, B) in {(2^16, 4096), (2^17, 8192)}, d = 1600, k = 32, TF32, synthetic activations, the same
#    seed; the median step_ms of the last 80 % of logged steps of each run and their ratio;
# 2. `finetune-bench --exchanges`: plain finetune against each exchange (dense, sparse, global) at
#    world size 1, GPT-2 XL shape.
# Prints one table per part last; logs in $OUT/distributed/. The binaries come packed in
# .devbin/distributed/ (`bash bench/pack.sh distributed`, on the machine without a GPU).
# DIST_STEPS (default 300): steps of each train-sae run.
set -uo pipefail
export CUDA_CACHE_MAXSIZE=${CUDA_CACHE_MAXSIZE:-4294967296}
. bench/lib.sh
begin distributed .devbin/distributed
WORK=/tmp/distributed-work
rm -rf "$WORK" && mkdir -p "$WORK"
STEPS=${DIST_STEPS:-300}
SYNTHETIC='source = "synthetic"
d_model = 1600
features = 16384
active_per_token = 32
held_out_tokens = 0'

# median_step_ms RUN_DIR: the median step_ms of the last 80 % of the run's train records.
median_step_ms() {
  python3 - "$1/metrics.jsonl" <<'PY'
import json, statistics, sys
ms = [r["metrics"]["step_ms"] for r in map(json.loads, open(sys.argv[1]))
      if r.get("kind") == "train" and "step_ms" in r.get("metrics", {})]
print(f"{statistics.median(ms[len(ms) // 5:]):.3f}" if ms else "nan")
PY
}

echo "| n | B | plain step ms | data, W = 1 (NCCL) step ms | ratio | wire bytes / step |" >"$LOG/train-sae.md"
echo "|---|---|---|---|---|---|" >>"$LOG/train-sae.md"
for shape in 65536x4096 131072x8192; do
  n=${shape%x*} b=${shape#*x}
  sae_config "sae-$n" "$SYNTHETIC" 'arch = "batchtopk"' "$n" "$b" "$STEPS"
  for mode in off data; do
    timeout 240 "$B/train-sae" "$WORK/sae-$n.toml" --set "distributed.mode=$mode" \
      --out "$WORK/run-$mode-$n" >"$LOG/train-sae-$mode-$n.log" 2>&1 ||
      echo "train-sae $mode $shape: FAILED rc=$?" >>"$LOG/train-sae.md"
  done
  plain=$(median_step_ms "$WORK/run-off-$n")
  data=$(median_step_ms "$WORK/run-data-$n")
  wire=$(python3 -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; w=[x['metrics'].get('wire_bytes') for x in r if x.get('kind')=='train']; w=[v for v in w if v is not None]; print(int(w[-1]) if w else '-')" \
    "$WORK/run-data-$n/metrics.jsonl" 2>/dev/null || echo -)
  ratio=$(python3 -c "import sys; print(f'{float(sys.argv[2]) / float(sys.argv[1]):.3f}')" "$plain" "$data" 2>/dev/null || echo -)
  echo "| $n | $b | $plain | $data | $ratio | $wire |" >>"$LOG/train-sae.md"
done

timeout 300 "$B/finetune-bench" --models gpt2-xl --selectors profk --exchanges dense,sparse,global \
  --steps 8 --warmup 3 >"$LOG/finetune.md" 2>&1 || echo "finetune-bench: FAILED rc=$?" >>"$LOG/finetune.md"

echo "# distributed at world size 1 on $GPU, $(date -u +%F), $((SECONDS - START)) s"
echo "## train-sae, synthetic d = 1600, k = 32, TF32, $STEPS steps"
cat "$LOG/train-sae.md"
echo "## finetune-bench --exchanges (GPT-2 XL)"
grep -E '^\||FAILED|rror' "$LOG/finetune.md" || tail -5 "$LOG/finetune.md"
