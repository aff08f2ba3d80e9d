"""dictionary_learning's own BatchTopKTrainer.update and MatryoshkaBatchTopKTrainer.update (its PyPI release,
dictionary-learning 0.1.0, installed unchanged), timed per step on the GPU.

    python bench/peers/dictionary_learning_matryoshka.py --shapes 65536x4096,131072x8192 --d 1600 --k 32 \
        --precisions tf32

The package's __init__ imports its activation buffer, which needs nnsight (not on the GPU machine, and not
used by the trainers): the package is registered from its installed folder without running that __init__,
and the trainer modules are imported from it as they are. The Matryoshka groups are the fractions 1/32,
1/16, 1/8 and the rest (2048, 4096, 8192, 51200 at n = 2^16). The trainers' dead-latent threshold is their
own (10M tokens), so the aux-k loss never runs in a run this short, as in sae-bench's rows without dead
latents. bf16 runs update() under torch.autocast, as dictionary_learning's trainSAE does.

Prints a table: trainer, n, B, precision, median step ms, peak memory (GiB).
"""
import argparse
import contextlib
import importlib.util
import sys
import time
import types

import torch

GROUP_FRACTIONS = [1 / 32, 1 / 16, 1 / 8, 1 - 1 / 32 - 1 / 16 - 1 / 8]


def trainers():
    spec = importlib.util.find_spec("dictionary_learning")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("dictionary_learning is not installed (bench/sae_matryoshka.sh installs it from .whl/)")
    package = types.ModuleType("dictionary_learning")
    package.__path__ = list(spec.submodule_search_locations)
    sys.modules["dictionary_learning"] = package
    from dictionary_learning.trainers.batch_top_k import BatchTopKTrainer
    from dictionary_learning.trainers.matryoshka_batch_top_k import MatryoshkaBatchTopKTrainer

    return {
        # Its learning-rate schedule asserts warmup_steps < steps (warmup's default is 1000).
        "batchtopk": lambda d, n, k: BatchTopKTrainer(
            steps=10000, warmup_steps=100, activation_dim=d, dict_size=n, k=k, layer=0, lm_name="bench", device="cuda", seed=0
        ),
        "matryoshka": lambda d, n, k: MatryoshkaBatchTopKTrainer(
            steps=10000,
            warmup_steps=100,
            activation_dim=d,
            dict_size=n,
            k=k,
            layer=0,
            lm_name="bench",
            group_fractions=GROUP_FRACTIONS,
            device="cuda",
            seed=0,
        ),
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="65536x4096,131072x8192")
    p.add_argument("--d", type=int, default=1600)
    p.add_argument("--k", type=int, default=32)
    p.add_argument("--precisions", default="tf32")
    p.add_argument("--trainers", default="batchtopk,matryoshka")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    a = p.parse_args()
    make = trainers()
    print("| trainer | n | B | precision | step ms | peak GiB |")
    print("|---|---|---|---|---|---|")
    for shape in a.shapes.split(","):
        n, b = (int(v) for v in shape.split("x"))
        x = torch.randn(b, a.d, device="cuda")
        for prec in a.precisions.split(","):
            torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
            torch.backends.cudnn.allow_tf32 = prec == "tf32"
            autocast = (
                torch.autocast("cuda", dtype=torch.bfloat16) if prec == "bf16" else contextlib.nullcontext()
            )
            for name in a.trainers.split(","):
                torch.manual_seed(0)
                trainer = make[name](a.d, n, a.k)
                torch.cuda.reset_peak_memory_stats()
                times = []
                # Step 0 sets b_dec to the geometric median: a warm-up step, never timed.
                for step in range(max(a.warmup, 1) + a.steps):
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    with autocast:
                        trainer.update(step, x)
                    torch.cuda.synchronize()
                    if step >= max(a.warmup, 1):
                        times.append((time.perf_counter() - t0) * 1e3)
                times.sort()
                peak = torch.cuda.max_memory_allocated() / 2**30
                print(f"| {name} | {n} | {b} | {prec} | {times[len(times) // 2]:.2f} | {peak:.2f} |", flush=True)
                del trainer
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
