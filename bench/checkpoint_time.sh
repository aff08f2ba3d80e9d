#!/usr/bin/env bash
# How long a stop takes at GPT-2 XL shapes, on the GPU machine, from the repo root: `train-sae` from the
# shards bench/data_path.sh extracted (d = 1600, k = 32, TF32) at (n, B) in {(2^16, 4096), (2^17, 8192)}
# gets SIGTERM mid-run; the table gives the seconds from the signal to the process's exit (the step in
# flight, the checkpoint, the exit), its exit code, the checkpoint's size, and the resume from it
# (a few more steps, rc). What a scheduler's grace period (SLURM's KillWait, docker stop -t) must cover.
# With CK_FINETUNE=1, also `finetune configs/gpt2xl-finetune.toml` (GPT-2 XL, random weights, a checkpoint of
# 24 GiB: weights, error-feedback residual, AdamW moments) the same way.
#   CK_BIN   folder with train-sae and finetune (default /tmp/dp-bin, where data_path.sh unpacks)
#   CK_WORK  folder with shards/ (default /tmp/dp)
#   CK_SAE   0 to leave out the train-sae runs
#   CK_SHAPES  the train-sae shapes, NxB (default "65536x4096 131072x8192")
# With SAE_CHECKPOINT_EVERY=100 the signal comes just as a periodic checkpoint starts being written in the
# background: the stop waits for it, then writes its own (the worst case).
set -uo pipefail
BIN=${CK_BIN:-/tmp/dp-bin}
WORK=${CK_WORK:-/tmp/dp}
LOG=${OUT:-/tmp/out}/checkpoint
mkdir -p "$LOG"
. bench/lib.sh
echo "| (n, B) | checkpoint bytes (training state + SAELens pair) | signal at | signal → exit s | rc | checkpoint on disk | resume rc |"
echo "|---|---|---|---|---|---|---|"
# stop NAME RUN-DIR RECORDS COMMAND...: starts COMMAND, sends SIGTERM once RUN-DIR/metrics.jsonl holds
# RECORDS train records; sets AT (records then), SECS (signal to exit) and RC.
stop() {
  local name=$1 run=$2 records=$3 pid t0 t1 c
  shift 3
  "$@" >"$LOG/$name.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 1200); do
    c=$(grep -c '"kind":"train"' "$run/metrics.jsonl" 2>/dev/null)
    [ "${c:-0}" -ge "$records" ] && break
    sleep 0.1
  done
  AT=$(grep -c '"kind":"train"' "$run/metrics.jsonl" 2>/dev/null)
  t0=$(date +%s.%N)
  kill -TERM $pid
  wait $pid
  RC=$?
  t1=$(date +%s.%N)
  SECS=$(awk "BEGIN { printf \"%.2f\", $t1 - $t0 }")
}
[ "${CK_SAE:-1}" = 0 ] || for shape in ${CK_SHAPES:-65536x4096 131072x8192}; do
  n=${shape%x*} b=${shape#*x} name=ck-$shape run=$WORK/runs/ck-$shape
  rm -rf "$run"
  sae_config "$name" "source = \"shards\"
dir = \"$WORK/shards\"" 'arch = "batchtopk"' "$n" "$b" 100000
  # Signal once the loop has logged a few windows (the run is in its steady state).
  stop "$name" "$run" 5 "$BIN/train-sae" "$WORK/$name.toml" --out "$run"
  at=$AT rc=$RC
  size=$(du -sh "$run/checkpoints" 2>/dev/null | cut -f1)
  # f32: the SAELens W_enc, W_dec and their two Adam moments each (biases are negligible).
  state=$(awk "BEGIN { printf \"%.2f GB\", 4 * 6 * $n * 1600 / 1e9 }")
  timeout 120 "$BIN/train-sae" "$WORK/$name.toml" --out "$run" --resume --set "train.steps=$(( at * 20 + 40 ))" \
    >"$LOG/$name.resume.log" 2>&1
  rrc=$?
  echo "| (2^$(awk "BEGIN { print log($n) / log(2) }"), $b), checkpoint_every ${SAE_CHECKPOINT_EVERY:-0} | $state | log record $at | $SECS | $rc | $size | $rrc |"
  rm -rf "$run" # GB of checkpoints: the local disk holds the shards and one run
done
if [ "${CK_FINETUNE:-0}" = 1 ]; then
  run=$WORK/runs/ck-finetune-xl
  rm -rf "$run"
  stop ck-finetune-xl "$run" 2 "$BIN/finetune" configs/gpt2xl-finetune.toml --out "$run" \
    --set train.steps=100000 --set log.every=5
  size=$(du -sh "$run/checkpoints" 2>/dev/null | cut -f1)
  echo "| finetune GPT-2 XL (1.56e9 params), batch 4 x 512 | weights, error-feedback residual, AdamW moments (and the velocity with momentum correction) | log record $AT | $SECS | $RC | $size | – |"
  rm -rf "$run"
fi
