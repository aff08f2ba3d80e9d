"""Prints the data-path table of bench/data_path.sh from its logs: per run, whole-run tokens/s (tokens over
the command's wall seconds, and over the loop's own wall time), the stall-free step (median over logging
windows of step_ms - data_wait_ms, first window left out; and its mean over steps, which slow windows
raise), the step-limited rate the median allows, and the share of the loop's wall time spent waiting for
data.

    python3 bench/data_path.py LOG_DIR EXTRACTED_TOKENS
"""
import json
import re
import statistics
import sys
from pathlib import Path


def walls(log):
    out = {}
    path = log / "walls.txt"
    if path.exists():
        for line in path.read_text().split("\n"):
            if line.strip():
                name, wall, rc = line.split()
                out[name] = (float(wall), int(rc))
    return out


def train_records(path):
    recs = []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r.get("kind") == "train":
            recs.append(r)
    return recs


def main():
    log, extracted = Path(sys.argv[1]), int(sys.argv[2])
    w = walls(log)
    print("| run | rc | tokens | command wall s | whole-run tok/s | loop tok/s | stall-free step ms (median / mean) | "
          "step-limited tok/s | whole-run / step-limited | data wait % of loop | windows waiting > 5 % |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    if "extract" in w:
        wall, rc = w["extract"]
        print(f"| extract (XL, layer 24, bf16, to disk) | {rc} | {extracted} | {wall:.1f} | "
              f"{extracted / wall:.3g} | – | – | – | – | – | – |")
    for name in sorted(k for k in w if k != "extract"):
        wall, rc = w[name]
        mpath = log / f"{name}.metrics.jsonl"
        if not mpath.exists():
            print(f"| {name} | {rc} | – | {wall:.1f} | – | – | – | – | – | – | – |")
            continue
        recs = train_records(mpath)
        if len(recs) < 2:
            continue
        last = recs[-1]
        tokens, loop_wall = last["tokens"], last["wall_s"]
        per_step = []
        weighted = []
        waited = 0.0
        busy = 0
        prev_step = 0
        for r in recs:
            m = r["metrics"]
            steps = r["step"] - prev_step
            prev_step = r["step"]
            wait = m.get("data_wait_ms", 0.0)
            waited += wait * steps
            per_step.append(m["step_ms"] - wait)
            weighted.append((steps, m["step_ms"] - wait))
            if wait > 0.05 * m["step_ms"]:
                busy += 1
        stall_free = statistics.median(per_step[1:])
        mean = sum(n * ms for n, ms in weighted[1:]) / max(1, sum(n for n, _ in weighted[1:]))
        batch = tokens / last["step"]
        limited = batch / (stall_free / 1e3)
        whole = tokens / wall
        print(f"| {name} | {rc} | {tokens} | {wall:.1f} | {whole:.3g} | {tokens / loop_wall:.3g} | "
              f"{stall_free:.2f} / {mean:.2f} | {limited:.3g} | {whole / limited:.2f} | "
              f"{100 * waited / 1e3 / loop_wall:.1f} | {busy}/{len(recs)} |")
    split_table(log, w)
    stage_table(log, w)


TIME_LINE = re.compile(r"^time: ([\d.]+) s before the first step \(device ([\d.]+) s, data ([\d.]+) s, "
                       r"first batch ([\d.]+) s, SAE ([\d.]+) s\), ([\d.]+) s training \(([\d.]+) s of it "
                       r"checkpointing\), ([\d.]+) s exporting", re.M)


def split_table(log, w):
    """Where each train-sae command's wall time went, from the `time:` line it prints last."""
    rows = []
    for name in sorted(k for k in w if k != "extract"):
        path = log / f"{name}.log"
        m = TIME_LINE.search(path.read_text(errors="replace")) if path.exists() else None
        if m:
            start, device, data, first, sae, train, ckpt, export = map(float, m.groups())
            rows.append(f"| {name} | {w[name][0]:.1f} | {start:.1f} | {device:.1f} | {data:.1f} | {first:.1f} | "
                        f"{sae:.1f} | "
                        f"{train - ckpt:.1f} | {ckpt:.1f} | {export:.1f} |")
    if rows:
        print("\nWhere the command's wall time goes (s; from its `time:` line)")
        print("| run | command wall | before the first step | device | data | first batch | SAE | loop "
              "(less checkpoints) | checkpointing | exporting |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        print("\n".join(rows))


def stage_table(log, w):
    """Per-stage medians of the runs logged with train.profile_stages (each stage synchronized)."""
    for name in sorted(w):
        mpath = log / f"{name}.metrics.jsonl"
        if not mpath.exists():
            continue
        recs = train_records(mpath)[1:]
        keys = sorted({k for r in recs for k in r["metrics"] if k.startswith("stage_")},
                      key=lambda k: list(recs[0]["metrics"]).index(k) if k in recs[0]["metrics"] else 0)
        if not keys:
            continue
        cols = ["step_ms", "data_wait_ms", "train_step_ms"] + keys
        med = {k: statistics.median(r["metrics"].get(k, 0.0) for r in recs) for k in cols}
        rest = med["step_ms"] - med["data_wait_ms"] - med["train_step_ms"]
        print(f"\nStage medians of {name} (ms; synchronized after each stage; 'outside' = loop step - data wait"
              " - train step: metrics, logging, the loop)")
        print("| " + " | ".join(c.removeprefix("stage_").removesuffix("_ms") for c in cols) + " | outside |")
        print("|" + "---|" * (len(cols) + 1))
        print("| " + " | ".join(f"{med[c]:.2f}" for c in cols) + f" | {rest:.2f} |")


if __name__ == "__main__":
    main()
