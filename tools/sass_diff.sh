#!/usr/bin/env bash
# Compare the machine code of two sets of fatbins kernel by kernel, without a GPU: for each kernel
# of BEFORE_DIR/*.fatbin, its SASS (cuobjdump -sass) against the same kernel's in any fatbin of
# AFTER_DIR, with addresses, the function name lines and symbol names stripped. Prints one line a
# kernel (same / DIFFERENT / missing) and exits 1 if any kernel differs or is missing. Usage:
#
#   tools/sass_diff.sh BEFORE_DIR AFTER_DIR [RENAMES]
#
# RENAMES: a file of "old_name new_name" lines for kernels renamed between the two.
# cuobjdump (and the nvdisasm it runs) come from the PATH, else from NVIDIA's pip wheels:
#   python3 -m pip install --target ~/.cache/sparsetrain/cuobjdump nvidia-cuda-cuobjdump==13.2.51
#   python3 -m pip install --target ~/.cache/sparsetrain/nvdisasm nvidia-cuda-nvdisasm==13.2.51
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,10p' "$0"; exit 2; }
before=$1 after=$2 renames=${3:-/dev/null}
for tool in cuobjdump nvdisasm; do
  command -v $tool >/dev/null || PATH=$PATH:$(dirname "$(ls ~/.cache/sparsetrain/$tool/nvidia/*/bin/$tool 2>/dev/null | head -1)")
  command -v $tool >/dev/null || { echo "sass_diff: no $tool (see the header)" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# One file a kernel under $2: its SASS with addresses, the function name and symbols stripped.
split() {
  mkdir -p "$2"
  for f in "$1"/*.fatbin; do cuobjdump -sass "$f"; done | awk -v dir="$2" '
    /Function : / { name = $3; file = dir "/" name; printf "" > file; next }
    name != "" && (/^ *\/\*[0-9a-f]{4}\*\// || /^ *\/\* 0x[0-9a-f]{16} \*\/ *$/) {
      line = $0
      sub(/^ *\/\*[0-9a-f]{4}\*\/ */, "", line)
      gsub(/`\([^)]*\)/, "`(sym)", line)
      print line >> file
    }'
}
split "$before" "$work/before"
split "$after" "$work/after"
status=0
for f in "$work"/before/*; do
  name=$(basename "$f")
  new=$(awk -v n="$name" '$1 == n { print $2 }' "$renames")
  new=${new:-$name}
  if [ ! -e "$work/after/$new" ]; then
    echo "missing   $name"; status=1
  elif cmp -s "$f" "$work/after/$new"; then
    if [ "$new" = "$name" ]; then echo "same      $name"; else echo "same      $name -> $new"; fi
  else
    echo "DIFFERENT $name -> $new"; status=1
  fi
done
exit $status
