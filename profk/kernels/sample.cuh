// Stage 1 of Prof-K: S indices per row drawn uniformly without replacement, gathered as (key, index).
//
// Sampling scheme: the first S images of a keyed bijection pi of [0, n). pi is a 6-round balanced
// Feistel network on [0, 2^(2h)) (2^(2h) >= n, so at most 4n) whose round function is a keyed 64-bit
// mixer; cycle-walking (apply pi again while the image is >= n) restricts it to a bijection of [0, n)
// because the orbit of any i < n returns to [0, n) before it returns to i. A bijection never repeats an
// index, so {pi(0), ..., pi(S-1)} is a set of S distinct indices; by the Luby–Rackoff construction a
// Feistel permutation with a pseudo-random round function is indistinguishable from a uniformly random
// permutation, whose first S images form a uniform S-subset. Each (row, attempt) gets its own key, so a
// redraw is a fresh independent sample, and every thread computes its indices with no coordination.
// Stage 2, the t-th largest sampled composite: for S <= 16384 and composites of at most 64 bits the same
// kernel selects it in registers (sample_select_*, one launch per attempt); otherwise the sample is
// written out and selected by the multi-launch radix selection of select.cu.
#pragma once
#include "block_select.cuh"

struct SampleArgs {
  const void* x;
  u64 n, rows;
  int mag, half_bits;
  u64 s, seed;
  u32 attempt, pad;
  u32* skeys;
  u64* sidx;
  RowList list;  // the rows still pending (all rows on the first attempt)
};

__device__ __forceinline__ u64 mix64(u64 z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__device__ __forceinline__ u64 feistel(u64 v, int h, u64 key) {
  const u64 mask = (h >= 64) ? ~0ull : ((1ull << h) - 1);
  u64 l = v >> h, r = v & mask;
#pragma unroll
  for (int i = 0; i < 6; ++i) {
    u64 f = mix64(r ^ (key + (u64)i * 0x632be59bd9b4e019ull)) & mask;
    u64 nl = r;
    r = l ^ f;
    l = nl;
  }
  return (l << h) | r;
}

__device__ __forceinline__ u64 permute(u64 i, u64 n, int h, u64 key) {
  u64 v = feistel(i, h, key);
  while (v >= n) v = feistel(v, h, key);
  return v;
}

// key_at(row, index) gives the key of one element of a row.
template <typename KeyAt>
__device__ void sample_body(const SampleArgs& a, KeyAt key_at) {
  const u64 total = list_len(a.list, a.rows) * a.s;
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (u64)gridDim.x * blockDim.x) {
    const u64 r = list_row(a.list, i / a.s), j = i % a.s;
    u64 key = mix64(a.seed ^ mix64(((u64)a.attempt << 40) ^ r));
    u64 idx = permute(j, a.n, a.half_bits, key);
    a.skeys[r * a.s + j] = key_at(r, idx);
    a.sidx[r * a.s + j] = idx;
  }
}

// Stages 1 and 2 fused, one block per pending row: writes the row's threshold composite to sel.tmin.
template <int THREADS, typename KeyAt>
__device__ void sample_select_body(const SampleArgs& a, RowSel* sel, u32 t, int ib, int tb, KeyAt key_at) {
  const u64 nrows = list_len(a.list, a.rows);
  for (u64 i = blockIdx.x; i < nrows; i += gridDim.x) {
    const u64 r = list_row(a.list, i);
    const u64 key = mix64(a.seed ^ mix64(((u64)a.attempt << 40) ^ r));
    u64 c[BS_PER];
#pragma unroll
    for (int p = 0; p < BS_PER; ++p) {
      const u64 j = threadIdx.x + (u64)p * THREADS;
      c[p] = 0;
      if (j < a.s) {
        const u64 idx = permute(j, a.n, a.half_bits, key);
        c[p] = (u64)composite(key_at(r, idx), idx, a.n, ib);
      }
    }
    const u64 tau = block_kth<THREADS>(c, (u32)a.s, t, tb);
    if (threadIdx.x == 0) sel[r].tmin = tau;
    __syncthreads();
  }
}

