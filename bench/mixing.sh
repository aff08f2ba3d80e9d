#!/usr/bin/env bash
# Shuffle quality, measured by what it does to the SAE: the tiny config (configs/tiny.toml: layer 2 of the
# default tiny GPT-2, 600 steps of 1024 tokens) with 4096 latents, trained on the same activations served
# four ways, three seeds each, and the held-out share of latents firing on < 1e-4 of the tokens
# (heldout_rare_fraction) beside held-out FVU and the dead fraction:
#   otf-corpus   on the fly, contexts in corpus order through the config's buffer (shuffle_contexts = false)
#   otf          on the fly as configured by default (contexts visited in a reshuffled order)
#   shards       from `extract`ed shards with the default cross-shard mixing (mix_shards = 4)
#   global       from the same shards through one buffer holding every training token (a global shuffle)
# The held-out set is the same for all four: 65536 tokens of the corpus' held-out split (shards of it for
# the shard runs). From the repo root:
#   bash bench/mixing.sh                      # CPU, binaries from target/release (about 40 min on 2 cores)
#   MIX_BIN=DIR DEVICE=cuda bash bench/mixing.sh
set -uo pipefail
BIN=${MIX_BIN:-target/release}
WORK=${MIX_WORK:-/tmp/mixing}
LOG=${MIX_LOG:-$WORK/logs}
DEVICE=${DEVICE:-cpu}
SEEDS=${MIX_SEEDS:-0 1 2}
VARIANTS=${MIX_VARIANTS:-otf-corpus otf shards global}
LATENTS=${MIX_LATENTS:-4096}
HELD=65536
mkdir -p "$WORK" "$LOG"

extract() { # SPLIT MAX-TOKENS DIR
  cat >"$WORK/extract-$1.toml" <<TOML
model = "tiny"
model_dtype = "f32"
device = "$DEVICE"
out_dir = "$3"
hook_points = ["blocks.2.hook_resid_post"]
dtype = "f32"
tokens_per_shard = 65536
batch_contexts = 16
drop_bos = true
writer_threads = 1
[data]
corpus = "default"
split = "$1"
held_out_fraction = 0.1
context = 64
max_tokens = $2
TOML
  [ -f "$3/manifest.json" ] || "$BIN/extract" "$WORK/extract-$1.toml" >"$LOG/extract-$1.log" 2>&1 ||
    { echo "extract $1 failed: $LOG/extract-$1.log" >&2; exit 1; }
}
extract train 100000000 "$WORK/train"
extract heldout $((HELD * 64 / 63 + 64)) "$WORK/heldout"
TRAIN_TOKENS=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['total_tokens'])" \
  "$WORK/train/manifest.json" 2>/dev/null || echo 4194304)

common=(--set device="$DEVICE" --set sae.latents="$LATENTS" --set eval.ce_contexts=0
  --set log.progress=false)
shard_config() { # NAME BUFFER MIX
  sed -n '1,/^\[data\]/p' configs/tiny.toml >"$WORK/$1.toml"
  cat >>"$WORK/$1.toml" <<TOML
source = "shards"
dir = "$WORK/train"
held_out_dir = "$WORK/heldout"
buffer_tokens = $2
mix_shards = $3
TOML
  sed -n '/^\[sae\]/,$p' configs/tiny.toml >>"$WORK/$1.toml"
}
shard_config shards 16384 4
shard_config global $(((TRAIN_TOKENS + 1023) / 1024 * 1024)) 1000

for seed in $SEEDS; do
  for variant in $VARIANTS; do
    case $variant in
      otf-corpus) cfg=(configs/tiny.toml --set data.shuffle_contexts=false --set data.held_out_tokens=$HELD) ;;
      otf) cfg=(configs/tiny.toml --set data.held_out_tokens=$HELD) ;;
      *) cfg=("$WORK/$variant.toml") ;;
    esac
    run=$WORK/runs/$variant-$seed
    rm -rf "$run"
    "$BIN/train-sae" "${cfg[@]}" "${common[@]}" --set seed="$seed" --out "$run" \
      >"$LOG/$variant-$seed.log" 2>&1 || echo "$variant seed $seed failed: $LOG/$variant-$seed.log" >&2
  done
done

python3 - "$WORK/runs" "$SEEDS" "$DEVICE" "$LATENTS" "$VARIANTS" <<'PY'
import json, statistics, sys
from pathlib import Path
runs, seeds, device, latents = Path(sys.argv[1]), sys.argv[2].split(), sys.argv[3], sys.argv[4]
variants = sys.argv[5].split()
def final(run):
    path = run / "metrics.jsonl"
    if not path.exists():
        return None
    out = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r.get("kind") in ("eval", "final"):
            out.update(r["metrics"])
        if r.get("kind") == "train":
            out["dead_fraction"] = r["metrics"].get("dead_fraction", out.get("dead_fraction"))
    return out
print(f"\nShuffle quality on the tiny config, {latents} latents, {device}, seeds {' '.join(seeds)}: share of latents "
      "firing on < 1e-4 of 65536 held-out tokens (mean ± spread over seeds)")
print("| stream | rare fraction | per seed | held-out FVU | dead fraction |")
print("|---|---|---|---|---|")
for variant in variants:
    finals = [final(runs / f"{variant}-{s}") for s in seeds]
    finals = [f for f in finals if f and "heldout_rare_fraction" in f]
    if not finals:
        print(f"| {variant} | failed | | | |")
        continue
    rare = [f["heldout_rare_fraction"] for f in finals]
    fvu = [f.get("heldout_fvu", float("nan")) for f in finals]
    dead = [f.get("dead_fraction", float("nan")) for f in finals]
    spread = statistics.pstdev(rare) if len(rare) > 1 else 0.0
    print(f"| {variant} | {100 * statistics.mean(rare):.2f} % ± {100 * spread:.2f} | "
          f"{' / '.join(f'{100 * r:.2f}' for r in rare)} | {statistics.mean(fvu):.4f} | "
          f"{100 * statistics.mean(dead):.2f} % |")
PY
