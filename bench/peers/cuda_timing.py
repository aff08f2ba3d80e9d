"""The timing loop the PyTorch peers share: CUDA events around each call (or round of calls)."""
import torch


def median_ms(f, iters, warmup=3, per_call=1):
    """Milliseconds per call of `f`: the median over `iters` timings, each of `per_call` calls back to
    back between two CUDA events, after `warmup` calls."""
    for _ in range(warmup):
        f()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(per_call):
            f()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / per_call)
    times.sort()
    return times[len(times) // 2]
