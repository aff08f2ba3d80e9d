#!/usr/bin/env python3
"""PyTorch peer of `finetune-bench`: one error-feedback top-k sparsified AdamW step of a GPT-2-shaped
random model, with the same shapes, density and update semantics as gradsparse.

Per step: forward + causal-LM loss + backward; residual += grad (one flat f32 residual over all
parameters, added in place through views); |residual|; torch.topk over all coordinates (global);
gather the selected values, zero them in the residual, and apply AdamW to the selected coordinates
only (moments read and written at those coordinates, global step count for the bias correction,
decoupled weight decay on the selected coordinates). The parameters are views of one flat buffer so
the sparse apply is one indexed update.

Prints a markdown table of median milliseconds per stage (CUDA-synchronized), after warm-up steps.

    python3 bench/peers/torch_ef_step.py [--models medium,xl] [--batch 4] [--context 512]
                                         [--density 1e-3] [--steps 8] [--precision tf32|fp32|bf16]
                                         [--ef-only]

`--ef-only` skips forward and backward: the gradients are random normal tensors of the parameters'
shapes (the same every step), as in `finetune-bench --ef-only`, so only the error-feedback overhead
(residual add + abs, torch.topk, sparse apply) is timed.
"""
import argparse
import statistics
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

SIZES = {"medium": (1024, 24, 16), "xl": (1600, 48, 25), "gpt2": (768, 12, 12)}


def model_of(name):
    d, layers, heads = SIZES[name]
    cfg = GPT2Config(n_embd=d, n_layer=layers, n_head=heads, n_positions=1024, vocab_size=50257)
    torch.manual_seed(0)
    with torch.device("cuda"):  # random init on the GPU: seconds instead of a minute for XL
        return GPT2LMHeadModel(cfg)


def flatten_params(model):
    """Makes every parameter a view of one flat buffer (tied weights counted once)."""
    params = list(dict.fromkeys(model.parameters()))
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    views, off = [], 0
    for p in params:
        n = p.numel()
        p.data = flat[off:off + n].view_as(p)
        views.append((p, off, n))
        off += n
    return flat, views


def sync():
    torch.cuda.synchronize()
    return time.perf_counter()


def run(name, args):
    model = model_of(name)
    flat, views = flatten_params(model)
    n = flat.numel()
    k = max(1, round(args.density * n))
    residual = torch.zeros(n, device="cuda")
    m = torch.zeros(n, device="cuda")
    v = torch.zeros(n, device="cuda")
    lr, b1, b2, eps, wd = 1e-4, 0.9, 0.999, 1e-8, 0.0
    autocast = args.precision == "bf16"
    torch.backends.cuda.matmul.allow_tf32 = args.precision != "fp32"
    torch.backends.cudnn.allow_tf32 = args.precision != "fp32"
    gen = torch.Generator(device="cuda").manual_seed(1)
    rows = {key: [] for key in ["fwd_bwd", "residual_abs", "topk", "apply", "step"]}
    fixed = [torch.randn(p.shape, device="cuda", generator=gen) for p, _, _ in views] if args.ef_only else None
    for step in range(args.warmup + args.steps):
        tokens = torch.randint(0, 50257, (args.batch, args.context), device="cuda", generator=gen)
        if args.ef_only:
            for (p, _, _), g in zip(views, fixed):
                p.grad = g
        t0 = sync()
        if not args.ef_only:
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                loss = model(tokens, labels=tokens).loss
            loss.backward()
        t1 = sync()
        for p, off, cnt in views:
            residual[off:off + cnt].add_(p.grad.reshape(-1))
            p.grad = None
        mag = residual.abs()
        t2 = sync()
        _, idx = torch.topk(mag, k, sorted=False)
        t3 = sync()
        del mag
        g = residual[idx]
        residual[idx] = 0
        t = step + 1
        mi = m[idx].mul_(b1).add_(g, alpha=1 - b1)
        vi = v[idx].mul_(b2).addcmul_(g, g, value=1 - b2)
        m[idx], v[idx] = mi, vi
        upd = (mi / (1 - b1 ** t)) / ((vi / (1 - b2 ** t)).sqrt_().add_(eps))
        flat[idx] = flat[idx] * (1 - lr * wd) - lr * upd
        t4 = sync()
        if step >= args.warmup:
            for key, dt in [("fwd_bwd", t1 - t0), ("residual_abs", t2 - t1), ("topk", t3 - t2),
                            ("apply", t4 - t3), ("step", t4 - t0)]:
                rows[key].append(dt * 1e3)
    med = {key: statistics.median(vals) for key, vals in rows.items()}
    overhead = med["residual_abs"] + med["topk"] + med["apply"]
    print(f"| torch {args.precision} | {name} | {n} | {k} | {med['step']:.1f} | {med['fwd_bwd']:.1f} | "
          f"{med['residual_abs']:.2f} | {med['topk']:.2f} | {med['apply']:.2f} | {overhead:.2f} |", flush=True)
    del model, flat, residual, m, v
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="medium,xl")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--density", type=float, default=1e-3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--precision", default="tf32", choices=["tf32", "fp32", "bf16"])
    ap.add_argument("--ef-only", action="store_true", help="random gradients, no forward or backward")
    args = ap.parse_args()
    what = "random gradients (no forward/backward)" if args.ef_only else f"batch {args.batch} x {args.context}"
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, {what}, "
          f"global top-{args.density * 100:g} %, median of {args.steps} steps after {args.warmup}")
    print("| impl | model | params N | k | step ms | fwd+bwd ms | residual add + abs ms | select ms | "
          "sparse apply ms | EF overhead ms |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        run(name, args)


if __name__ == "__main__":
    main()
