// Radix selection inside one block of THREADS threads (256 or 1024) over at most THREADS * BS_PER
// composites of at most 64 bits held in registers: one launch finds a row's threshold, where the
// multi-launch selection of select.cu needs one launch per digit. Used for the sample threshold and
// for buffers that fit (up to 16384 elements; up to 4096 with 256 threads, four times as many rows
// resident at once).
#pragma once
#include <cub/block/block_scan.cuh>
#include "common.cuh"

#define BS_PER 16

// The kth-largest of a block's composites, exactly: the result is an element's composite. `each(f)`
// calls f(c, valid) on every composite slot this thread holds, the same number of times in every
// lane of a warp (the lanes' bins are aggregated with a warp match); all valid composites share the
// bits of `prefix` above `hi` (0 and the composite width when nothing is known yet). A digit whose
// bucket is taken whole ends the digits: with `cut_only` the result is then that cut (exactly kth
// composites at or above it, not always an element's composite), else one more read finds the
// bucket's smallest composite, which is the kth-largest. Composites are distinct.
template <int THREADS, typename Each>
__device__ u64 block_kth_with(Each each, u32 kth, int hi, u64 prefix, bool cut_only = false) {
  typedef cub::BlockScan<u32, THREADS> Scan;
  __shared__ typename Scan::TempStorage tmp;
  __shared__ u32 hist[256];
  __shared__ u64 s_prefix, s_min;
  __shared__ u32 s_kleft;
  __shared__ int s_lo;
  __shared__ bool s_done;
  const int t = threadIdx.x;
  if (t == 0) {
    s_prefix = prefix;
    s_kleft = kth;
    s_done = false;
    s_lo = hi;
    s_min = ~0ull;
  }
  __syncthreads();
  while (hi > 0 && !s_done) {
    const int lo = hi > 8 ? hi - 8 : 0, width = hi - lo;
    if (t < 256) hist[t] = 0;
    __syncthreads();
    const u64 pre = s_prefix;
    const u64 top = hi >= 64 ? 0 : pre >> hi;
    const u32 mask = (1u << width) - 1;
    each([&](u64 c, bool valid) {
      const bool in = valid && (hi >= 64 ? 0 : c >> hi) == top;
      const u32 bin = in ? (u32)(c >> lo) & mask : ~0u;
      count_bin(hist, bin);
    });
    __syncthreads();
    const int bins = 1 << width;
    const u32 mine = t < bins ? hist[bins - 1 - t] : 0;
    u32 incl;
    Scan(tmp).InclusiveSum(mine, incl);
    const u32 kl = s_kleft;
    __syncthreads();
    if (t < bins && incl >= kl && incl - mine < kl) {
      s_prefix = pre | ((u64)(bins - 1 - t) << lo);
      s_kleft = kl - (incl - mine);
      s_done = incl == kl;
      s_lo = lo;
    }
    __syncthreads();
    hi = lo;
  }
  if (cut_only || s_lo == 0) return s_prefix;
  // The bucket at s_prefix was taken whole before its last digit: its smallest composite.
  const int lo = s_lo;
  const u64 bucket = s_prefix >> lo;
  u64 best = ~0ull;
  each([&](u64 c, bool valid) {
    if (valid && (c >> lo) == bucket && c < best) best = c;
  });
#pragma unroll
  for (int o = 16; o; o >>= 1) {
    const u64 other = __shfl_xor_sync(0xffffffffu, best, o);
    best = other < best ? other : best;
  }
  if ((t & 31) == 0 && best != ~0ull)
    atomicMin((unsigned long long*)&s_min, (unsigned long long)best);
  __syncthreads();
  return s_min;
}

// The kth-largest of the valid composites held in registers (slot p of thread t is element
// t + p * THREADS, valid when below `count`) of width `tb`.
template <int THREADS>
__device__ u64 block_kth(const u64 (&c)[BS_PER], u32 count, u32 kth, int tb) {
  return block_kth_with<THREADS>(
      [&](auto f) {
#pragma unroll
        for (int p = 0; p < BS_PER; ++p) f(c[p], (u32)(threadIdx.x + p * THREADS) < count);
      },
      kth, tb, 0);
}
