#!/usr/bin/env bash
# GPU side of the peer comparison, one element type per device call (each under 10 min): Prof-K on
# the peers' shapes (`profk bench --device cuda --peers`) and, case by case in processes of their own under a
# timeout, torch.topk, FlashInfer (deterministic and not) and CUB DeviceTopK on the shapes of issue
# 15's table; then the joined table (bench/peers/topk_table.py). Runs from the repository root on the GPU
# machine with .devbin/topk_peers.xz (bench/peers/build_topk_peers.sh) and .devbin/profk/profk.xz
# (bench/pack.sh profk) carried:
#   bash bench/peers/topk_peers.sh f32 single; bash bench/peers/topk_peers.sh f32 rows; then bf16, f16
# (GROUP single: one-row and flat shapes; rows: batched and masked rows; none: both). Each call
# appends to $OUT/topk_peers/peers.jsonl. A case that hangs, faults or runs out of memory still
# leaves its JSON line (ok = false).
set -uo pipefail
DTYPE=${1:-f32}
GROUP=${2:-all}
case $DTYPE in f32 | bf16 | f16) ;; *) echo "usage: bench/peers/topk_peers.sh f32|bf16|f16 [single|rows]" >&2; exit 2 ;; esac
LOG=${OUT:-/tmp/out}/topk_peers
mkdir -p "$LOG"
. bench/lib.sh
B=/tmp/peerbin
[ -d .devbin/profk ] && unpack .devbin/profk "$B"
mkdir -p "$B" && xz -dc .devbin/topk_peers.xz >"$B/topk_peers" && chmod +x "$B/topk_peers"
LINES=$LOG/peers.jsonl
# Seconds one peer case may take (the program reports a hang itself after LIMIT; timeout is the
# backstop for a process that cannot).
LIMIT=${LIMIT:-60}

# peer PEER SHAPE ROWS N K [--masked]: one measurement, one JSON line in $LINES.
peer() {
  local name=$1 shape=$2 rows=$3 n=$4 k=$5 masked=${6:-} out rc
  local flags=(--shape "$shape" --rows "$rows" --n "$n" --k "$k" --dtype "$DTYPE" $masked)
  if [ "$name" = torch ]; then
    out=$(timeout $((LIMIT + 30)) python3 bench/peers/torch_topk.py --case "${flags[@]}" 2>>"$LOG/stderr.log")
  else
    out=$(timeout $((LIMIT + 30)) "$B/topk_peers" --peer "$name" "${flags[@]}" --limit "$LIMIT" 2>>"$LOG/stderr.log")
  fi
  rc=$?
  out=$(grep '^{' <<<"$out" | tail -1)
  if [ -z "$out" ]; then
    local why="exit status $rc without a result"
    [ $rc -eq 124 ] && why="hang: killed after $((LIMIT + 30)) s"
    out=$(printf '{"peer":"%s","shape":"%s","rows":%s,"n":%s,"k":%s,"dtype":"%s","masked":%s,"ms":null,"aux_bytes":0,"ok":false,"error":"%s"}' \
      "$name" "$shape" "$rows" "$n" "$k" "$DTYPE" "$([ -n "$masked" ] && echo true || echo false)" "$why")
  fi
  echo "$out" | tee -a "$LINES"
}

# every CASE: SHAPE ROWS N K [--masked]; single rows also go to CUB (it selects from one sequence).
every() {
  local peers=(torch flashinfer flashinfer_det)
  [ "$2" = 1 ] && peers+=(cub)
  for p in "${peers[@]}"; do peer "$p" "$@"; done
}

START=$SECONDS
GPU=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
if [ -x "$B/profk" ]; then
  step "Prof-K on the peers' shapes ($DTYPE)" 180 "profk-$DTYPE" "$B/profk" bench --device cuda --peers --dtype "$DTYPE"
fi
# f32 has every shape of issue 15's table; bf16 and f16 the batched, masked and flat ones.
if [ "$GROUP" != rows ]; then
  if [ "$DTYPE" = f32 ]; then
    for lg in 24 28 30; do every "2^$lg" 1 $((1 << lg)) 8192; done
  fi
  every "flat 8192x2^17" 1 $((1 << 30)) 262144
fi
if [ "$GROUP" != single ]; then
  if [ "$DTYPE" = f32 ]; then
    for k in 64 1024; do every 16x2^20 16 $((1 << 20)) $k; done
  fi
  for k in 64 1024; do every 1024x2^18 1024 $((1 << 18)) $k; done
  for k in 64 1024; do every 128x2^20 128 $((1 << 20)) $k; done
  for k in 64 512; do every "masked 8192x32768" 8192 32768 $k --masked; done
fi

echo "## Top-k peers ($DTYPE, $GROUP) on $GPU ($(date -u +%F\ %H:%M) UTC), total $((SECONDS - START)) s"
printf '%s\n' "${SUMMARY[@]}"
python3 bench/peers/topk_table.py "$LOG"
