"""A BatchTopK SAE training step written the way dictionary_learning's BatchTopKTrainer writes it
(dictionary_learning/trainers/batch_top_k.py): dense encoder, torch.topk over the flattened batch, scatter into a
dense B x n matrix, nn.Linear-style decoder, aux-k loss on dead latents, decoder-parallel gradient removed,
grad-norm clipping, Adam, decoder renormalized, threshold EMA.

    python bench/peers/dictionary_learning_step.py --shapes 65536x4096,131072x8192 --d 1600 --k 32 \
        --precisions f32,tf32,bf16 [--dead 0,0.05,1]

`--dead` holds a fixed random fraction of the latents dead in every step (0: aux-k off; 1: every latent, the
worst case; `--aux` is `--dead 0,1`). Prints a table: n, B, precision, aux dead, median step ms, topk ms, peak
memory (GiB).
"""
import argparse
import time

import torch


class BatchTopKSAE(torch.nn.Module):
    def __init__(self, d, n, k):
        super().__init__()
        self.k = k
        self.W_dec = torch.nn.Parameter(torch.nn.init.kaiming_uniform_(torch.empty(n, d)))
        with torch.no_grad():
            self.W_dec /= self.W_dec.norm(dim=1, keepdim=True)
        self.W_enc = torch.nn.Parameter(self.W_dec.detach().t().clone())
        self.b_enc = torch.nn.Parameter(torch.zeros(n))
        self.b_dec = torch.nn.Parameter(torch.zeros(d))
        self.register_buffer("threshold", torch.tensor(-1.0))

    def encode(self, x):
        post_relu = torch.relu((x - self.b_dec) @ self.W_enc + self.b_enc)
        flat = post_relu.flatten()
        t0 = torch.cuda.Event(enable_timing=True)
        t1 = torch.cuda.Event(enable_timing=True)
        t0.record()
        vals, idx = flat.topk(self.k * x.shape[0], sorted=False)
        t1.record()
        acts = torch.zeros_like(flat).scatter_(-1, idx, vals).reshape(post_relu.shape)
        return acts, post_relu, (t0, t1)

    def decode(self, acts):
        return acts @ self.W_dec + self.b_dec


def step(ae, opt, x, since_fired, dead_tokens, k_aux, aux_alpha):
    acts, post_relu, ev = ae.encode(x)
    x_hat = ae.decode(acts)
    e = x - x_hat
    since_fired += x.shape[0]
    since_fired[(acts > 0).any(0)] = 0
    l2 = e.pow(2).sum(-1).mean()
    dead = since_fired >= dead_tokens
    loss = l2
    if dead.sum() > 0:
        kk = min(k_aux, int(dead.sum()))
        aux_lat = torch.where(dead[None], post_relu, -torch.inf)
        aux_acts, aux_idx = aux_lat.topk(kk, sorted=False)
        aux_buf = torch.zeros_like(post_relu).scatter_(-1, aux_idx, aux_acts)
        r = e.detach()
        aux_l2 = (r - aux_buf @ ae.W_dec).pow(2).sum(-1).mean()
        denom = (r - r.mean(0, keepdim=True)).pow(2).sum(-1).mean()
        loss = loss + aux_alpha * (aux_l2 / denom).nan_to_num(0.0)
    with torch.no_grad():
        kept = acts[acts > 0]
        if kept.numel() > 0:
            m = kept.min()
            ae.threshold.copy_(m if ae.threshold < 0 else 0.999 * ae.threshold + 0.001 * m)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    with torch.no_grad():
        g = ae.W_dec.grad
        g -= (g * ae.W_dec).sum(1, keepdim=True) * ae.W_dec
    torch.nn.utils.clip_grad_norm_(ae.parameters(), 1.0)
    opt.step()
    with torch.no_grad():
        ae.W_dec /= ae.W_dec.norm(dim=1, keepdim=True)
    return ev


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="65536x4096,131072x8192")
    p.add_argument("--d", type=int, default=1600)
    p.add_argument("--k", type=int, default=32)
    p.add_argument("--precisions", default="f32,tf32,bf16")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--dead", default="0", help="fractions of the latents held dead, comma-separated")
    p.add_argument("--aux", action="store_true", help="shorthand for --dead 0,1")
    a = p.parse_args()
    fractions = [0.0, 1.0] if a.aux else [float(f) for f in a.dead.split(",")]
    dev = "cuda"
    print("| n | B | precision | aux dead | step ms | topk ms | peak GiB |")
    print("|---|---|---|---|---|---|---|")
    for shape in a.shapes.split(","):
        n, b = (int(v) for v in shape.split("x"))
        x = torch.randn(b, a.d, device=dev)
        for prec in a.precisions.split(","):
            torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
            for frac in fractions:
                torch.manual_seed(0)
                ae = BatchTopKSAE(a.d, n, a.k).to(dev)
                opt = torch.optim.Adam(ae.parameters(), lr=2e-4 / (n / 2**14) ** 0.5)
                # A fixed random set of dead latents: their counters sit above the dead threshold and are
                # restored before every step (latents that fire would otherwise revive).
                gen = torch.Generator().manual_seed(5)
                dead_set = torch.ones(n, dtype=torch.bool) if frac >= 1 else torch.rand(n, generator=gen) < frac
                dead_tokens = 10**9
                pattern = (dead_set.float() * (2.0 * dead_tokens)).to(dev)
                since = pattern.clone()
                label = f"{100 * frac:.0f} %" if dead_set.any() else "off"
                torch.cuda.reset_peak_memory_stats()
                times, topk = [], []
                for i in range(a.warmup + a.steps):
                    since.copy_(pattern)
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=prec == "bf16"):
                        ev = step(ae, opt, x, since, dead_tokens, a.d // 2, 1 / 32)
                    torch.cuda.synchronize()
                    if i >= a.warmup:
                        times.append((time.perf_counter() - t0) * 1e3)
                        topk.append(ev[0].elapsed_time(ev[1]))
                times.sort()
                topk.sort()
                peak = torch.cuda.max_memory_allocated() / 2**30
                print(f"| {n} | {b} | {prec} | {label} | {times[len(times)//2]:.2f} | "
                      f"{topk[len(topk)//2]:.2f} | {peak:.2f} |", flush=True)
                del ae, opt


if __name__ == "__main__":
    main()
