#!/usr/bin/env python3
"""Streaming ceilings of the error-feedback pass on this GPU: PyTorch's copy, in-place add and sum over
one flat f32 buffer of GPT-2 XL's parameter count, CUDA-event medians.

    python3 bench/peers/torch_stream_ceiling.py [--n 1557611200]
"""
import argparse

import torch
from cuda_timing import median_ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1557611200)
    n = ap.parse_args().n
    g = torch.randn(n, device="cuda")
    r = torch.zeros(n, device="cuda")
    o = torch.empty(n, device="cuda")
    print(f"# torch {torch.__version__} on {torch.cuda.get_device_name()}, N = {n} f32")
    print("| stream | bytes | ms | TB/s |")
    print("|---|---|---|---|")
    for name, fn, per in [("copy o <- g", lambda: o.copy_(g), 8),
                          ("r.add_(g) (read g, r; write r)", lambda: r.add_(g), 12),
                          ("g.sum() (read)", lambda: g.sum(), 4)]:
        ms = median_ms(fn, 5, warmup=1)
        print(f"| {name} | {per} N | {ms:.3f} | {per * n / ms / 1e9:.2f} |", flush=True)


if __name__ == "__main__":
    main()
