#!/usr/bin/env python3
"""Hugging Face transformers peer of `extract`: GPT-2 residual-stream activations, tokens/s.

Same shapes as bench/activations.sh: a GPT-2-shaped model with random weights, sdpa
attention, batch of B contexts x T tokens, run through the first L blocks (the stream after
block L-1, i.e. blocks.L.hook_resid_pre; L = n_layer runs everything and applies ln_f), the
activations copied to host memory each batch (as extraction must). Nothing is written to disk.
Median tokens/s over timed batches after warm-up. Prints a markdown table.

    python3 bench/peers/hf_extract.py [--size xl] [--batch 16] [--ctx 1024] [--layers 24 48] [--dtypes bf16 f32]
"""
import argparse
import statistics
import time

import torch
import transformers

SIZES = {"gpt2": (768, 12, 12), "medium": (1024, 24, 16), "large": (1280, 36, 20), "xl": (1600, 48, 25)}
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def build(size, layers, dtype):
    d, n_layer, n_head = SIZES[size]
    cfg = transformers.GPT2Config(n_embd=d, n_layer=n_layer, n_head=n_head, n_positions=1024,
                                  attn_implementation="sdpa")
    with torch.device("cuda"):
        model = transformers.GPT2Model(cfg).to(DTYPES[dtype]).eval()
    if layers < n_layer:
        model.h = model.h[:layers]
        model.ln_f = torch.nn.Identity()
    return model


@torch.inference_mode()
def measure(model, batch, ctx, iters, warmup):
    tokens = torch.randint(0, 50257, (iters + warmup, batch, ctx), device="cuda")
    rates = []
    for i in range(iters + warmup):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model(input_ids=tokens[i], use_cache=False).last_hidden_state
        host = out[:, 1:].reshape(-1, out.shape[-1]).cpu()  # drop BOS position, copy to host
        torch.cuda.synchronize()
        if i >= warmup:
            rates.append(host.shape[0] / (time.perf_counter() - t0))
    return statistics.median(rates)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="xl", choices=SIZES)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--layers", type=int, nargs="+", default=[24, 48])
    ap.add_argument("--dtypes", nargs="+", default=["bf16", "f32"])
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    a = ap.parse_args()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}, "
          f"allow_tf32={torch.backends.cuda.matmul.allow_tf32}, "
          f"float32_matmul_precision={torch.get_float32_matmul_precision()}")
    print("| peer | model | dtype | layers | batch x ctx | tokens/s |")
    print("|---|---|---|---|---|---|")
    for dtype in a.dtypes:
        for layers in a.layers:
            model = build(a.size, layers, dtype)
            rate = measure(model, a.batch, a.ctx, a.iters, a.warmup)
            print(f"| HF transformers (sdpa) | gpt2-{a.size} random | {dtype} | {layers} | {a.batch} x {a.ctx} | {rate:.3g} |",
                  flush=True)
            del model
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
