# Sourced by the bench/*_final.sh scripts on the GPU machine, from the repository root.

# unpack SRC DEST: every SRC/*.xz decompressed into DEST, executable; and the workspace path the test
# binaries were built at (they look for the workspace's files there) linked to this checkout.
unpack() {
  local f n
  mkdir -p "$2"
  for f in "$1"/*.xz; do
    n=$(basename "$f" .xz)
    xz -dc "$f" >"$2/$n" && chmod +x "$2/$n"
  done
  [ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
}

# step LABEL TIMEOUT-SECONDS LOG-NAME COMMAND...: runs COMMAND into $LOG/LOG-NAME.log under a timeout
# and adds a row (verdict, seconds, the last `test result` line) to SUMMARY.
SUMMARY=()
step() {
  local label=$1 limit=$2 name=$3
  shift 3
  local t0=$SECONDS rc
  timeout "$limit" "$@" >"$LOG/$name.log" 2>&1
  rc=$?
  local verdict=ok
  [ $rc -eq 0 ] || verdict="FAILED rc=$rc"
  [ $rc -eq 124 ] && verdict="TIMED OUT after ${limit}s"
  SUMMARY+=("| $label | $verdict | $((SECONDS - t0)) s | $(grep -E '^test result' "$LOG/$name.log" | tail -1 | sed 's/test result: //; s/;.*finished/, finished/')")
}
