"""PyTorch peer of activations' layer_norm_train_bench: torch.nn.functional.layer_norm over the last
dimension at rows x d, forward alone and forward + backward (gradients for x, weight and bias;
y.backward(ones) as the Rust side seeds). Medians of 10 rounds of calls back to back, CUDA events.
Prints a markdown table.

    python3 bench/peers/layer_norm_train_torch.py [--rows 2048] [--widths 1024,1600] [--dtype f32]
"""
import argparse

import torch
import torch.nn.functional as F

import cuda_timing


def median_ms(f, iters):
    """Milliseconds per call: the median over 10 rounds of iters / 10 calls back to back, timed with
    CUDA events around each round (as the Rust side synchronizes once per round)."""
    return cuda_timing.median_ms(f, 10, per_call=max(1, iters // 10))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=2048)
    p.add_argument("--widths", default="1024,1600")
    p.add_argument("--dtype", default="f32")
    p.add_argument("--iters", type=int, default=200)
    a = p.parse_args()
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[a.dtype]
    dev = torch.device("cuda")
    print("| device | rows x d | dtype | torch fwd ms | torch fwd+bwd ms |")
    print("|---|---|---|---|---|")
    for d in map(int, a.widths.split(",")):
        x = torch.randn(a.rows, d, device=dev, dtype=dtype, requires_grad=True)
        w = (1 + 0.2 * torch.randn(d, device=dev)).to(dtype).requires_grad_()
        b = (0.2 * torch.randn(d, device=dev)).to(dtype).requires_grad_()
        seed = torch.ones(a.rows, d, device=dev, dtype=dtype)

        def fwd():
            F.layer_norm(x, (d,), w, b, 1e-5)

        def both():
            F.layer_norm(x, (d,), w, b, 1e-5).backward(seed)
            x.grad = w.grad = b.grad = None

        print(f"| {torch.cuda.get_device_name()} torch {torch.__version__} | {a.rows} x {d} | {a.dtype} "
              f"| {median_ms(fwd, a.iters):.4f} | {median_ms(both, a.iters):.4f} |")


if __name__ == "__main__":
    main()
