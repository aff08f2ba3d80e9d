"""PyTorch peer of activations::ops::causal_attention_train: forward and forward+backward of
F.scaled_dot_product_attention(is_causal=True) in f32 on the packed c_attn output [B, T, 3d],
with the split / view / transpose of GPT-2's attention around it, as the HF and nanoGPT blocks do.

    python3 bench/peers/torch_attention_train.py --shapes 4x512x16x64 4x512x25x64

Prints a markdown table of medians (wall clock, torch.cuda.synchronize after each call); the
backward seeds d(out) with ones, like the candle benchmark. `--no-tf32` turns TF32 off.
"""
import argparse
import time

import torch
import torch.nn.functional as F


def attention(qkv, h):
    b, t, three_d = qkv.shape
    d = three_d // 3
    q, k, v = (x.view(b, t, h, d // h).transpose(1, 2) for x in qkv.split(d, dim=2))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return y.transpose(1, 2).contiguous().view(b, t, d)


def median_ms(f, iters):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    v = []
    for _ in range(iters):
        t0 = time.perf_counter()
        f()
        torch.cuda.synchronize()
        v.append(time.perf_counter() - t0)
    v.sort()
    return v[len(v) // 2] * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", nargs="+", default=["4x512x16x64", "4x512x25x64"])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--no-tf32", action="store_true")
    a = ap.parse_args()
    tf32 = not a.no_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    dev = torch.device("cuda")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, f32, TF32 {'on' if tf32 else 'off'}")
    print("| b x t x h x hd | SDPA backend | fwd ms | fwd+bwd ms |")
    print("|---|---|---|---|")
    for s in a.shapes:
        b, t, h, hd = (int(x) for x in s.split("x"))
        qkv = torch.randn(b, t, 3 * h * hd, device=dev, requires_grad=True)
        ones = torch.ones(b, t, h * hd, device=dev)
        backends = [
            ("default", None),
            ("efficient", torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION),
            ("math", torch.nn.attention.SDPBackend.MATH),
        ]
        for name, backend in backends:
            def run(backward):
                def f():
                    if backend is None:
                        y = attention(qkv, h)
                    else:
                        with torch.nn.attention.sdpa_kernel(backend):
                            y = attention(qkv, h)
                    if backward:
                        y.backward(ones)
                        qkv.grad = None
                return f

            try:
                fwd = median_ms(run(False), a.iters)
                both = median_ms(run(True), a.iters)
                print(f"| {b} x {t} x {h} x {hd} | {name} | {fwd:.3f} | {both:.3f} |")
            except RuntimeError as e:
                print(f"| {b} x {t} x {h} x {hd} | {name} | failed: {str(e).splitlines()[0][:60]} | |")


if __name__ == "__main__":
    main()
