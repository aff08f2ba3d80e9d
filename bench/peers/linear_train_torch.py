"""PyTorch peer of activations' linear_train_bench: forward + backward of one linear layer
(torch.nn.functional.linear, then F.gelu(approximate='tanh') where asked) at n tokens, f32 with
TF32 matmuls, gradients for x, W and b; y.backward(ones) as the Rust side seeds, and the forward alone. Medians of CUDA-event
timings after warm-ups. Prints a markdown table.

    python3 bench/peers/linear_train_torch.py [--tokens 2048] [--iters 20]
"""
import argparse

import torch
import torch.nn.functional as F
from cuda_timing import median_ms

SHAPES = [(1600, 4800, False), (1600, 6400, True), (6400, 1600, False)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--iters", type=int, default=20)
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dev = torch.device("cuda")
    n = a.tokens
    print("| device | n | d_in | d_out | act | torch ms | torch fwd ms |")
    print("|---|---|---|---|---|---|---|")
    for d_in, d_out, gelu in SHAPES:
        x = torch.randn(n, d_in, device=dev, requires_grad=True)
        w = (0.02 * torch.randn(d_out, d_in, device=dev)).requires_grad_()
        b = (0.5 * torch.randn(d_out, device=dev)).requires_grad_()
        seed = torch.ones(n, d_out, device=dev)

        def step():
            y = F.linear(x, w, b)
            if gelu:
                y = F.gelu(y, approximate="tanh")
            y.backward(seed)
            x.grad = w.grad = b.grad = None

        def forward():
            y = F.linear(x, w, b)
            if gelu:
                y = F.gelu(y, approximate="tanh")

        act = "Gelu" if gelu else "Identity"
        full, fwd = median_ms(step, a.iters), median_ms(forward, a.iters)
        print(f"| {torch.cuda.get_device_name()} torch {torch.__version__} TF32 | {n} | {d_in} | {d_out} | {act} | {full:.3f} | {fwd:.3f} |")


if __name__ == "__main__":
    main()
