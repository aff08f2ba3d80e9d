#!/usr/bin/env python3
"""Joins Prof-K's grid with the peers' JSON lines into issue 15's table.

    python3 bench/peers/topk_table.py LOG_DIR

LOG_DIR (bench/peers/topk_peers.sh's) holds peers.jsonl, one line per peer measurement, and
profk-DTYPE.log, the markdown table of `profk bench --device cuda --peers --dtype DTYPE`, whose
Profk rows give Prof-K's milliseconds and aux memory. Prints one markdown row per (shape, k, dtype)
the peers measured: every peer's milliseconds (or why it has none), the fastest peer, the ratio
Prof-K / fastest, and the issue's target with whether Prof-K meets it.
"""
import json
import pathlib
import sys

PEERS = [("torch", "torch.topk"), ("flashinfer", "FlashInfer"),
         ("flashinfer_det", "FlashInfer det."), ("cub", "CUB DeviceTopK")]

# Issue 15's targets: (shape, k) -> (text, test of Prof-K's ms and aux MB given the peers' lines).
BATCHED = ("≤ 0.8× FlashInfer", lambda ms, aux, p: ok_ms(p, "flashinfer") and ms <= 0.8 * p["flashinfer"]["ms"])
TARGETS = {
    ("2^30", 8192): ("≤ 1.05 ms, aux ≤ 8 MB", lambda ms, aux, p: ms <= 1.05 and aux <= 8.0),
    ("2^28", 8192): ("≤ 0.29 ms", lambda ms, aux, p: ms <= 0.29),
    ("2^24", 8192): ("≤ 0.05 ms", lambda ms, aux, p: ms <= 0.05),
    ("flat 8192x2^17", 262144): ("≤ 1.1 ms", lambda ms, aux, p: ms <= 1.1),
    ("masked 8192x32768", 64): ("≤ 0.5 ms", lambda ms, aux, p: ms <= 0.5),
    ("masked 8192x32768", 512): ("≤ 0.5 ms", lambda ms, aux, p: ms <= 0.5),
}
for shape in ["1024x2^18", "128x2^20"]:
    for k in [64, 1024]:
        TARGETS[(shape, k)] = BATCHED


def ok_ms(peers, name):
    line = peers.get(name)
    return line is not None and line["ok"] and line["ms"] is not None


def profk_rows(log_dir):
    """(shape, k, dtype) -> (ms, aux MB) from the Profk rows of every profk-DTYPE.log."""
    rows = {}
    for log in sorted(log_dir.glob("profk-*.log")):
        dtype = log.stem.removeprefix("profk-")
        for line in log.read_text(errors="replace").splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            # | shape | mode | dist | k | selector | ms | GB/s | of read BW | attempts | aux MB |
            if len(cells) == 10 and cells[4] == "Profk":
                try:
                    rows[(cells[0], int(cells[3]), dtype)] = (float(cells[5]), float(cells[9]))
                except ValueError:
                    continue
    return rows


def peer_lines(log_dir):
    """(shape, k, dtype) -> {peer: its last line}, in the order the cases ran."""
    cases = {}
    path = log_dir / "peers.jsonl"
    if not path.exists():
        return cases
    for text in path.read_text(errors="replace").splitlines():
        try:
            line = json.loads(text)
        except json.JSONDecodeError:
            continue
        cases.setdefault((line["shape"], line["k"], line["dtype"]), {})[line["peer"]] = line
    return cases


def cell(line):
    if line is None:
        return "–"
    if line["ok"] and line["ms"] is not None:
        aux = f" ({line['aux_bytes'] / 1e6:.1f} MB)" if line["peer"] == "cub" else ""
        return f"{line['ms']:.3f}{aux}"
    error = line.get("error") or "failed"
    if error.startswith("hang"):
        return "hangs"
    if error.startswith("unsupported"):
        return "–"
    return "fails: " + error.replace("|", "/")[:60]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: topk_table.py LOG_DIR")
    log_dir = pathlib.Path(sys.argv[1])
    profk = profk_rows(log_dir)
    print("| shape | k | dtype | Prof-K ms (aux MB) | " + " | ".join(label for _, label in PEERS)
          + " | fastest peer | Prof-K / fastest | target | met |")
    print("|---" * (len(PEERS) + 8) + "|")
    for (shape, k, dtype), peers in peer_lines(log_dir).items():
        mine = profk.get((shape, k, dtype))
        timed = [(peers[name]["ms"], label) for name, label in PEERS if ok_ms(peers, name)]
        fastest = min(timed) if timed else None
        ratio = f"{mine[0] / fastest[0]:.2f}" if mine and fastest else "–"
        target, test = TARGETS.get((shape, k), ("–", None))
        met = "–" if mine is None or test is None else ("yes" if test(mine[0], mine[1], peers) else "no")
        print(f"| {shape} | {k} | {dtype} | "
              + (f"{mine[0]:.3f} ({mine[1]:.1f})" if mine else "–") + " | "
              + " | ".join(cell(peers.get(name)) for name, _ in PEERS)
              + f" | {fastest[1] if fastest else '–'} | {ratio} | {target} | {met} |")


if __name__ == "__main__":
    main()
