# Sourced by the bench/WORKLOAD.sh run scripts on the GPU machine, from the repository root (where the
# test binaries find the workspace's fixtures: runtime::workspace_file; SPARSETRAIN_ROOT overrides it).
# Each script sets LOG (its log folder) first.

# unpack SRC DEST: every SRC/*.xz decompressed into DEST, executable.
unpack() {
  local f n
  mkdir -p "$2"
  for f in "$1"/*.xz; do
    n=$(basename "$f" .xz)
    xz -dc "$f" >"$2/$n" && chmod +x "$2/$n"
  done
}

# The short form of the last `test result` line of the log $1.
test_result() {
  grep -Eo 'test result: [a-zA-Z]+\. [0-9]+ passed; [0-9]+ failed' "$1" | tail -1 | sed 's/test result: //'
}

# module_tests BIN MODULE [WORD]: the full names of the tests of MODULE (a former test file) in the
# one-binary test suite BIN, only those containing WORD if given, for `BIN --exact NAMES`. When none
# match it prints a name no test has, so that the run reports 0 tests instead of running them all.
module_tests() {
  local names
  names=$("$1" --list 2>/dev/null | sed -n "s/^\($2::[^:].*\): test\$/\1/p" | grep -F -- "${3:-}")
  echo "${names:-no_test_of_$2}"
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
  SUMMARY+=("| $label | $verdict | $((SECONDS - t0)) s | $(test_result "$LOG/$name.log" | sed 's/;.*finished/, finished/')")
}

# run_test NAME TIMEOUT-SECONDS COMMAND...: runs a test binary into $LOG/test-NAME.log and adds
# "NAME: N passed; M failed (ok|FAILED);" to TESTS.
TESTS=""
run_test() {
  local name=$1 limit=$2 r=ok
  shift 2
  timeout "$limit" "$@" >"$LOG/test-$name.log" 2>&1 || r=FAILED
  TESTS="$TESTS $name: $(test_result "$LOG/test-$name.log") ($r);"
}

# ef_overhead_table OURS-LOG TORCH-LOG: the GPT-2 XL error-feedback overhead table of finetune-bench
# --ef-only and of bench/peers/torch_ef_step.py --ef-only, ours first.
ef_overhead_table() {
  echo "| impl | model | params N | k | residual update (torch: add + abs) | select | update + select | sparse apply | EF overhead |"
  echo "|---|---|---|---|---|---|---|---|---|"
  grep -h '^| gradsparse' "$1" || tail -3 "$1"
  # torch columns: step, fwd+bwd (zero here), residual add + abs, topk, apply, overhead
  awk -F'|' '/^\| torch/ {printf "| %s | %s | %s | %s | %s | %s | %.2f | %s | %s |\n", $2, $3, $4, $5, $8, $9, $8 + $9, $10, $11}' "$2" || true
  grep -q '^| torch' "$2" || tail -3 "$2"
}

# begin NAME PACKED: the start of a run script: LOG=$OUT/NAME (created), the packed binaries of
# the folder PACKED unpacked into B, START and GPU (name, driver) set.
begin() {
  LOG=${OUT:-/tmp/out}/$1
  mkdir -p "$LOG"
  B=/tmp/$1-bin
  unpack "$2" "$B"
  START=$SECONDS
  GPU=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
}

# sae_config NAME SOURCE-TOML ARCH-TOML N B STEPS: the train-sae config of the GPU benchmarks (d from the
# data, k = 32, TF32, profk, no eval, logged every 20 steps, checkpoints every $SAE_CHECKPOINT_EVERY steps
# (default 0: only at the end) as $WORK/NAME.toml.
sae_config() {
  cat >"$WORK/$1.toml" <<TOML
name = "$1"
seed = 0
device = "cuda"
[data]
$2
[sae]
$3
latents = $4
k = 32
[train]
batch_size = $5
steps = $6
warmup_steps = 100
precision = "tf32"
checkpoint_every = ${SAE_CHECKPOINT_EVERY:-0}
[selector]
kind = "profk"
compare = false
[eval]
enabled = false
[log]
every = 20
progress = false
TOML
}

# section TITLE LIMIT COMMAND...: the command's table rows (or test verdicts) under a heading in $R.
section() {
  local title=$1 limit=$2
  shift 2
  echo "## $title" >> "$R"
  timeout "$limit" "$@" 2>&1 | grep -E '^(\||#|test result|check:)|panicked|MISMATCH' >> "$R"
}

# kernels LABEL COUNT PROFK-ARGS...: name, grid and duration (us) of the first COUNT Prof-K kernels
# under Nsight Compute (candle's input kernels left out), read from its CSV by column name.
kernels() {
  local label=$1 count=$2
  shift 2
  echo "## ncu $label: kernel, grid, block, duration us" >> "$R"
  timeout 150 ncu --clock-control none --kernel-name-base function \
    -k regex:'^(sample|block_|filter|classify|select|rank_|sort_|out_|tie_|rows_|nan_|acc_|Device|take_)' \
    --metrics gpu__time_duration.sum --csv -c "$count" "$B/profk" "$@" 2>/dev/null | python3 -c '
import csv, sys
rows = [r for r in csv.reader(sys.stdin) if len(r) > 5]
if not rows:
    sys.exit()
h = rows[0]
col = {n: h.index(n) for n in ("Kernel Name", "Grid Size", "Block Size", "Metric Name", "Metric Unit", "Metric Value") if n in h}
total = 0.0
for r in rows[1:]:
    if r[col["Metric Name"]] != "gpu__time_duration.sum":
        continue
    v = float(r[col["Metric Value"]].replace(",", ""))
    unit = r[col["Metric Unit"]]
    us = v / 1e3 if unit in ("ns", "nsecond") else v * 1e3 if unit in ("ms", "msecond") else v
    total += us
    print("|", r[col["Kernel Name"]][:40], "|", r[col["Grid Size"]], "|", r[col["Block Size"]], "|", f"{us:.1f}", "|")
print("| sum |", "|", "|", f"{total:.1f}", "|")' >> "$R"
}

# profk_begin SCRIPT MODE: the start of bench/profk.sh: R=$OUT/r.txt (headed by the call, the GPU and
# the date) and B=/tmp/b with the packed .devbin/profk unpacked (bench/peers/topk_peers.sh finds the
# profk CLI there too).
profk_begin() {
  R=${OUT:-/tmp/out}/r.txt
  B=/tmp/b
  unpack .devbin/profk "$B"
  { echo "# device call: $1 $2"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; } >"$R"
}

# profk_checks BIN-DIR: the shared CUDA test bodies (selection, rows, statistics, accumulation), the
# graph capture test and every CUDA selector against the CPU path, as sections of $R. A script run
# after another in the same call, on the same build, skips them with PROFK_CHECKED=1.
profk_checks() {
  if [ -n "${PROFK_CHECKED:-}" ]; then
    echo "## checks: run earlier in this call on the same build" >>"$R"
    return
  fi
  local t
  for t in selection rows statistics accumulate; do
    # shellcheck disable=SC2046 # one word per test name
    section "test $t (cuda)" 150 "$1/profk_it" --exact $(module_tests "$1/profk_it" $t cuda)
  done
  section "graph capture" 60 "$1/graph_capture"
  section "profk bench --device cuda --check --no-table" 90 "$1/profk" bench --device cuda --check --no-table
}
