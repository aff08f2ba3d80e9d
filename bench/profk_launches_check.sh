#!/usr/bin/env bash
# A short GPU check after a routing change (< 2 min): the shared CUDA test bodies, every selector
# against the CPU path, the target rows, the single-row shapes by every path, and the single-row peers
# with a 10 s limit a case (CUB's 2^30 and flat cases exceed it and read "hangs": take CUB from
# bench/profk_launches_final.sh). Carry .devbin/pkrows/ and .devbin/topk_peers.xz; output in $OUT/r.txt.
R=${OUT:-/tmp/out}/r.txt
. bench/lib.sh
unpack .devbin/pkrows /tmp/b
mkdir -p .devbin/pk && cp .devbin/pkrows/profk.xz .devbin/pk/
{ echo "# H200 device call: bench/profk_launches_check.sh, the cost rule's 2^16 sample for one row of 2^30 and the split bound at 2^23 (f32): CUDA tests, check, targets, row shapes 2^2x, bench/topk_peers.sh f32 single (LIMIT=10)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; } > "$R"
for t in selection rows statistics; do
  echo "## test $t (cuda)" >> "$R"; timeout 60 /tmp/b/$t cuda 2>&1 | grep -E "test result|panicked|FAIL" >> "$R"
done
echo "## graph capture" >> "$R"; timeout 40 /tmp/b/graph_capture 2>&1 | grep -E "test result|panicked" >> "$R"
echo "## profk bench --device cuda --check --no-table" >> "$R"; timeout 40 /tmp/b/profk bench --device cuda --check --no-table 2>&1 | tail -1 >> "$R"
echo "## profk bench --device cuda --targets" >> "$R"; timeout 40 /tmp/b/profk bench --device cuda --targets 2>/dev/null | grep '^|' >> "$R"
echo "## profk bench --device cuda --row-shapes --only 2^2" >> "$R"; timeout 40 /tmp/b/profk bench --device cuda --row-shapes --only "2^2" 2>/dev/null | grep '^|' >> "$R"
echo "## bench/topk_peers.sh f32 single" >> "$R"; LIMIT=10 timeout 100 bash bench/topk_peers.sh f32 single 2>&1 | grep -E '^(\||#)' >> "$R"
date -u >> "$R"
