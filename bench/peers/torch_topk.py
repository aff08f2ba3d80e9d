#!/usr/bin/env python3
"""torch.topk and torch.sort on the shapes of `profk bench --device cuda`, timed the same way.

Median milliseconds over CUDA-event-timed calls after a warm-up, inputs rotated, and the peak extra
device memory of one call. Prints a markdown table (stdout) in the columns of profk's table.

    python3 bench/peers/torch_topk.py [--quick | --targets] [--dtype f32|f16|bf16]

With --case, one case of bench/peers/topk_peers.sh instead, with the flags of bench/peers/topk_peers.cu,
checked against a sort of every row, as one JSON line (also on failure):

    python3 bench/peers/torch_topk.py --case --shape LABEL --rows R --n N --k K --dtype D [--masked]
"""
import argparse
import json
import math

import torch

READ_TBPS = 4.41


def make(dims, dist, dtype):
    if dist == "normal":
        x = torch.randn(dims, device="cuda")
    elif dist == "uniform":
        x = torch.empty(dims, device="cuda").uniform_(128.6, 128.7)
    elif dist == "cauchy":
        x = torch.empty(dims, device="cuda").cauchy_()
    elif dist == "masked":
        x = torch.randn(dims, device="cuda")
        x[..., dims[-1] // 2:] = float("-inf")
    return x.to(dtype)


def grid(quick):
    ks = [1 << 13] if quick else [1 << 5, 1 << 8, 1 << 13, 1 << 16, 1 << 19]
    cases = []
    for lg in [20, 24, 26, 28, 30]:
        for k in ks:
            cases.append((f"2^{lg}", [1 << lg], k, "rowwise", "normal"))
    for d in ["uniform", "cauchy"]:
        for lg in [24, 28, 30]:
            cases.append((f"2^{lg}", [1 << lg], 1 << 13, "rowwise", d))
    for k in [1 << 13, 1 << 16]:
        cases.append(("2^31+2^30", [(1 << 31) + (1 << 30)], k, "flat", "normal"))
    for rows, lg in [(16, 20), (128, 20), (1024, 18)]:
        for k in [64, 1024]:
            cases.append((f"{rows}x2^{lg}", [rows, 1 << lg], k, "rowwise", "normal"))
    cases.append(("flat 4096x2^16", [4096, 1 << 16], 131072, "flat", "normal"))
    cases.append(("flat 8192x2^17", [8192, 1 << 17], 262144, "flat", "normal"))
    for k in [64, 512]:
        cases.append(("masked 8192x32768", [8192, 32768], k, "rowwise", "masked"))
    return cases


def targets():
    """The rows of `profk bench --device cuda --targets`."""
    return [("2^30", [1 << 30], 1 << 13, "rowwise", "normal"),
            ("flat 4096x2^16", [4096, 1 << 16], 131072, "flat", "normal"),
            ("flat 8192x2^17", [8192, 1 << 17], 262144, "flat", "normal")]


def timed(fn, xs, reps):
    for x in xs:
        fn(x)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for i in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        out = fn(xs[i % len(xs)])
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
        del out
    peak = torch.cuda.max_memory_allocated() - base
    times.sort()
    return times[len(times) // 2], peak


def checked(x, values, indices, k):
    """None when every row's values are its top-k multiset and the indices distinct and pointing at
    them; else what differs."""
    if not torch.equal(torch.gather(x, -1, indices), values):
        return "check: values differ from the input at their indices"
    if k > 1 and not bool((torch.sort(indices, dim=-1).values.diff(dim=-1) > 0).all()):
        return "check: a row repeats an index"
    want = torch.sort(x, dim=-1, descending=True).values[:, :k]
    if not torch.equal(torch.sort(values, dim=-1, descending=True).values, want):
        return "check: values are not the top-k multiset of their row"
    return None


def case(args, dtype):
    """One case: torch.topk on [rows, n], timed and checked, reported as one JSON line."""
    line = {"peer": "torch", "shape": args.shape, "rows": args.rows, "n": args.n, "k": args.k,
            "dtype": args.dtype, "masked": args.masked, "ms": None, "aux_bytes": 0, "ok": False,
            "error": None}
    try:
        dims = [args.rows, args.n]
        dist = "masked" if args.masked else "normal"
        xs = [make(dims, dist, dtype) for _ in range(3 if args.rows * args.n * 4 * 3 <= 1 << 30 else 1)]
        fn = lambda x: torch.topk(x, args.k, dim=-1)
        values, indices = fn(xs[0])
        line["error"] = checked(xs[0], values, indices, args.k)
        del values, indices
        line["ms"], line["aux_bytes"] = timed(fn, xs, args.reps)
        line["ok"] = line["error"] is None
    except Exception as e:  # an OOM or a launch failure is a result of this peer, not a crash
        line["error"] = f"{type(e).__name__}: {e}".splitlines()[0]
    print(json.dumps(line), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--targets", action="store_true", help="only the target rows, torch.topk only")
    ap.add_argument("--dtype", default="f32", choices=["f32", "f16", "bf16"])
    ap.add_argument("--case", action="store_true", help="one case as a JSON line (flags below)")
    ap.add_argument("--shape", default="")
    ap.add_argument("--rows", type=int, default=1)
    ap.add_argument("--n", type=int, default=1 << 20)
    ap.add_argument("--k", type=int, default=64)
    ap.add_argument("--masked", action="store_true")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    if args.case:
        return case(args, dtype)
    print(f"# torch {torch.__version__} on {torch.cuda.get_device_name()}")
    print("| shape | mode | dist | k | selector | ms | GB/s | of read BW | aux MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, dims, k, mode, dist in (targets() if args.targets else grid(args.quick)):
        n = math.prod(dims)
        xs = [make(dims, dist, dtype) for _ in range(1 if n >= 1 << 30 else 3)]
        reps = 10 if n >= 1 << 28 else 30
        view = (lambda x: x.reshape(-1)) if mode == "flat" else (lambda x: x)
        sels = [("torch.topk", lambda x: torch.topk(view(x), k, dim=-1))]
        if (k == 1 << 13 or len(dims) > 1) and n <= 1 << 30 and not args.targets:
            sels.append(("torch.sort", lambda x: torch.sort(view(x), dim=-1, descending=True)))
        for name, fn in sels:
            try:
                ms, peak = timed(fn, xs, reps)
            except torch.OutOfMemoryError:
                print(f"| {label} | {mode} | {dist} | {k} | {name} | OOM | | | |", flush=True)
                torch.cuda.empty_cache()
                continue
            gbs = n * xs[0].element_size() / ms / 1e6
            print(f"| {label} | {mode} | {dist} | {k} | {name} | {ms:.3f} | {gbs:.0f} | {gbs / (READ_TBPS * 1e3):.2f} | {peak / 1e6:.1f} |",
                  flush=True)
        del xs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
