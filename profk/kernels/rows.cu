// Row-wise exact top-k with one block per row, for rows short enough that a block's second read of its
// row still finds it in L2 (src/cuda/rows.rs says which shapes come here).
//
// Pass 1 streams the row once (16-byte loads) into a histogram of the top 12 bits of every element's
// key. The bin holding the k-th largest key gives the threshold bin: every element of a higher bin is
// selected, and the k - above largest of the bin remain to be found. Pass 2 re-reads the row, writes the
// indices of the higher bins straight out and keeps the bin's elements as (key, index) composites in
// shared memory; an exact radix selection over them (block_kth) gives the cut. A bin larger than the
// shared buffer marks the row for the dense fallback (an exact count, so the result is always exact).
// Ties resolve by the composite: equal keys rank by lower index.
#include <cub/block/block_scan.cuh>
#include "block_select.cuh"

#define ROWS_THREADS 256
#define ROWS_BITS 12
#define ROWS_BINS (1 << ROWS_BITS)
#define ROWS_CAP (ROWS_THREADS * BS_PER)
// 16-byte loads each thread keeps in flight per round of a pass.
#define ROWS_UNROLL 4

static_assert(ROWS_BINS * 4 <= ROWS_CAP * 8, "the histogram shares the candidates' buffer");

// Calls f(j, raw bits, valid) for every element of the row, every thread of the block the same number
// of times (valid = false for padding), so that f may use warp-wide votes. The unaligned head and the
// tail take one scalar round; the body goes in 16-byte vectors.
template <typename T, typename F>
__device__ __forceinline__ void visit_row(const T* row, u64 n, F&& f) {
  typedef typename Ops<T>::Vec Vec;
  const int V = Ops<T>::VEC;
  const u64 t = threadIdx.x;
  u64 head = ((16 - ((u64)row & 15)) & 15) / sizeof(T);
  if (head > n) head = n;
  const u64 nvec = (n - head) / V;
  const u64 tail = head + nvec * V;
  {
    const u64 m = head + (n - tail);
    const bool valid = t < m;
    const u64 j = t < head ? t : tail + (t - head);
    f(j, valid ? Ops<T>::raw1(row[j]) : 0u, valid);
  }
  const Vec* vp = (const Vec*)(row + head);
  for (u64 b = 0; b < nvec; b += ROWS_UNROLL * ROWS_THREADS) {
    Vec w[ROWS_UNROLL];
#pragma unroll
    for (int u = 0; u < ROWS_UNROLL; ++u) {
      const u64 v = b + u * ROWS_THREADS + t;
      if (v < nvec) w[u] = vp[v];
    }
#pragma unroll
    for (int u = 0; u < ROWS_UNROLL; ++u) {
      const u64 v = b + u * ROWS_THREADS + t;
      const bool valid = v < nvec;
#pragma unroll
      for (int q = 0; q < V; ++q) f(head + v * V + q, valid ? Ops<T>::raw(w[u], q) : 0u, valid);
    }
  }
}

// One histogram count per valid lane; a warp whose lanes share a bin (a masked tail, a constant run)
// adds once instead of 32 conflicting atomics.
__device__ __forceinline__ void hist_add(u32* h, u32 bin, bool valid) {
  const u32 b0 = __shfl_sync(0xffffffffu, bin, 0);
  const u32 live = __ballot_sync(0xffffffffu, valid);
  if (__all_sync(0xffffffffu, !valid || bin == b0)) {
    if ((threadIdx.x & 31) == 0 && live) atomicAdd(&h[b0], (u32)__popc(live));
  } else if (valid) {
    atomicAdd(&h[bin], 1u);
  }
}

// A slot in a shared array for every lane with `take`, one atomic per warp.
__device__ __forceinline__ u32 warp_slot(u32* fill, bool take) {
  const unsigned lane = threadIdx.x & 31;
  const u32 ballot = __ballot_sync(0xffffffffu, take);
  u32 base = 0;
  if (ballot) {
    const int leader = __ffs(ballot) - 1;
    if ((int)lane == leader) base = atomicAdd(fill, (u32)__popc(ballot));
    base = __shfl_sync(0xffffffffu, base, leader);
  }
  return base + __popc(ballot & ((1u << lane) - 1));
}

template <typename T>
__device__ void rows_topk(const T* x, u64 n, u64 rows, u64 k, int mag, int ib, int count_nan, u64* out,
                          RowRun* run, Global* g) {
  typedef cub::BlockScan<u32, ROWS_THREADS> Scan;
  const int KB = Ops<T>::KB;
  const int SHIFT = KB - ROWS_BITS;
  const int PER = ROWS_BINS / ROWS_THREADS;
  __shared__ union {
    u32 hist[ROWS_BINS];
    u64 cand[ROWS_CAP];
  } sm;
  __shared__ typename Scan::TempStorage scan;
  __shared__ u32 s_bin, s_above, s_count, s_out, s_cand;
  const u32 t = threadIdx.x;
  for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + r * n;
    for (u32 i = t; i < ROWS_BINS; i += ROWS_THREADS) sm.hist[i] = 0;
    if (t == 0) s_out = s_cand = 0;
    __syncthreads();

    // Pass 1: the histogram, and the NaN count when NaN is an error.
    u64 nan_count = 0, nan_first = ~0ull;
    visit_row(row, n, [&](u64 j, u32 raw, bool valid) {
      hist_add(sm.hist, Ops<T>::key_bits(raw, mag) >> SHIFT, valid);
      if (count_nan && valid && Ops<T>::nan_bits(raw)) {
        ++nan_count;
        if (j < nan_first) nan_first = j;
      }
    });
    if (nan_count) {
      atomicAdd(&g->nan_count, nan_count);
      atomicMax(&g->nan_first, ~(r * n + nan_first));  // stored inverted: zero means none
    }
    __syncthreads();

    // The bin holding the k-th largest: thread t owns PER consecutive bins from the top.
    u32 mine = 0;
#pragma unroll
    for (int i = 0; i < PER; ++i) mine += sm.hist[ROWS_BINS - 1 - (t * PER + i)];
    u32 before;
    Scan(scan).ExclusiveSum(mine, before);
    u64 acc = before;
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const u32 b = ROWS_BINS - 1 - (t * PER + i);
      const u32 c = sm.hist[b];
      if (acc < k && acc + c >= k) {
        s_bin = b;
        s_above = (u32)acc;
        s_count = c;
      }
      acc += c;
    }
    __syncthreads();
    const u32 tbin = s_bin, count = s_count;
    const u32 kleft = (u32)k - s_above;
    // The bin taken whole needs no selection (k = n among others); a bin over the buffer falls back.
    const bool whole = count == kleft;
    if (!whole && count > ROWS_CAP) {
      if (t == 0) run[r].status = ROW_FALLBACK;
      __syncthreads();
      continue;
    }

    // Pass 2: the higher bins go out, the threshold bin's elements into the buffer.
    u64* o = out + r * k;
    visit_row(row, n, [&](u64 j, u32 raw, bool valid) {
      const u32 key = Ops<T>::key_bits(raw, mag);
      const u32 bin = key >> SHIFT;
      const bool take = valid && (bin > tbin || (whole && bin == tbin));
      const bool keep = valid && !whole && bin == tbin;
      const u32 pos = warp_slot(&s_out, take);
      if (take && pos < k) o[pos] = j;
      const u32 slot = warp_slot(&s_cand, keep);
      if (keep && slot < ROWS_CAP) sm.cand[slot] = (u64)composite(key, j, n, ib);
    });
    __syncthreads();

    if (!whole) {
      u64 c[BS_PER];
#pragma unroll
      for (int p = 0; p < BS_PER; ++p) {
        const u32 i = t + p * ROWS_THREADS;
        c[p] = i < count ? sm.cand[i] : 0;
      }
      const u64 tau = block_kth<ROWS_THREADS>(c, count, kleft, KB + ib);
      const u64 mask = ib >= 64 ? ~0ull : ((1ull << ib) - 1);
#pragma unroll
      for (int p = 0; p < BS_PER; ++p) {
        const u32 i = t + p * ROWS_THREADS;
        if (i < count && c[p] >= tau) {
          const u32 pos = atomicAdd(&s_out, 1u);
          if (pos < k) o[pos] = n - 1 - (c[p] & mask);
        }
      }
    }
    if (t == 0) run[r].status = ROW_OK;
    __syncthreads();
  }
}

#define ROWS_KERNEL(SUF, T)                                                                          \
  extern "C" __global__ void __launch_bounds__(ROWS_THREADS)                                         \
      rows_topk_##SUF(const T* x, u64 n, u64 rows, u64 k, int mag, int ib, int count_nan, u64* out,   \
                      RowRun* run, Global* g) {                                                      \
    rows_topk<T>(x, n, rows, k, mag, ib, count_nan, out, run, g);                                    \
  }

ROWS_KERNEL(f32, float)
ROWS_KERNEL(f16, __half)
ROWS_KERNEL(bf16, __nv_bfloat16)
