// Stage 1 of Prof-K: S indices per row drawn uniformly without replacement, gathered as (key,
// index).
//
// Sampling scheme: the first S images of a keyed bijection pi of [0, n). pi is a 6-round balanced
// Feistel network on [0, 2^(2h)) (2^(2h) >= n, so at most 4n) whose round function is a keyed
// 64-bit mixer; cycle-walking (apply pi again while the image is >= n) restricts it to a bijection
// of [0, n) because the orbit of any i < n returns to [0, n) before it returns to i. A bijection
// never repeats an index, so {pi(0), ..., pi(S-1)} is a set of S distinct indices; by the
// Luby–Rackoff construction a Feistel permutation with a pseudo-random round function is
// indistinguishable from a uniformly random permutation, whose first S images form a uniform
// S-subset. Each (row, attempt) gets its own key, so a redraw is a fresh independent sample, and
// every thread computes its indices with no coordination.
// Stage 2, the t-th largest sampled composite: for S <= 16384 and composites of at most 64 bits the
// same kernel selects it in registers (sample_select_*, one launch per attempt, one block per row).
// Rows too few to fill the device spread their sample over many blocks instead (sample_spread_*):
// each block keeps its slice's t largest, the row's last block selects among them. Otherwise the
// sample is written out and selected by the radix selection of select.cu.
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
static_assert(sizeof(SampleArgs) == 88,
              "SampleArgs: the size its Rust mirror (src/cuda/abi.rs) asserts");

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
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (u64)gridDim.x * blockDim.x) {
    const u64 r = list_row(a.list, i / a.s), j = i % a.s;
    u64 key = mix64(a.seed ^ mix64(((u64)a.attempt << 40) ^ r));
    u64 idx = permute(j, a.n, a.half_bits, key);
    a.skeys[r * a.s + j] = key_at(r, idx);
    a.sidx[r * a.s + j] = idx;
  }
}

// Stages 1 and 2 fused, one block per pending row: writes the row's threshold composite to
// sel.tmin.
template <int THREADS, typename KeyAt>
__device__ void sample_select_body(const SampleArgs& a, RowSel* sel, u32 t, int ib, int tb,
                                   KeyAt key_at) {
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

// Largest rank that block_kth_by_rounds serves: a round costs two block barriers, a digit of
// block_kth_with about as much plus a warp match per slot.
#define ROUNDS_MAX 8
// Candidate slots a thread of sample_spread's last block holds: 256 * 8 = 2048 candidates a row.
#define SPREAD_SLOTS 8

// The kth-largest of a block's composites (N registers a thread, unused ones zero) by kth rounds,
// each taking the block's largest remaining one. Composites other than zero are distinct, so a
// round's largest has one owner; once it is zero, so is every later one.
template <int THREADS, int N>
__device__ u64 block_kth_by_rounds(const u64 (&c)[N], u32 kth) {
  __shared__ u64 warp_top[THREADS / 32];
  __shared__ u64 round_top;
  u32 taken = 0;
  u64 top = 0;
  for (u32 round = 0; round < kth; ++round) {
    u64 mine = 0;
#pragma unroll
    for (int p = 0; p < N; ++p)
      if (!(taken >> p & 1) && c[p] > mine) mine = c[p];
    u64 w = mine;
#pragma unroll
    for (int o = 16; o; o >>= 1) {
      const u64 other = __shfl_xor_sync(0xffffffffu, w, o);
      w = other > w ? other : w;
    }
    if ((threadIdx.x & 31) == 0) warp_top[threadIdx.x >> 5] = w;
    __syncthreads();
    if (threadIdx.x == 0) {
      u64 b = 0;
      for (int i = 0; i < THREADS / 32; ++i) b = warp_top[i] > b ? warp_top[i] : b;
      round_top = b;
    }
    __syncthreads();
    top = round_top;
    if (top == 0) break;
    if (mine == top) {
      bool first = true;
#pragma unroll
      for (int p = 0; p < N; ++p)
        if (first && !(taken >> p & 1) && c[p] == top) {
          taken |= 1u << p;
          first = false;
        }
    }
  }
  return top;
}

// Stages 1 and 2 over `bpr` blocks per pending row (256 threads, PER samples a thread): each block
// draws its slice of the sample and writes the slice's t largest composites (zeros where the slice
// holds fewer) to the row's candidates, `bpr * t <= 256 * SPREAD_SLOTS` of them; the row's last
// block selects the t-th largest candidate. The overall t largest are each among their slice's t
// largest, so that is the sample's t-th largest, exactly as one block over the whole sample finds
// it.
// Registers are sized to what each stage holds (PER, SPREAD_SLOTS): unrolled over BS_PER slots, the
// Feistel rounds and warp matches made a kernel of 10 000 instructions whose warps waited mostly on
// instruction fetch.
template <int PER, typename KeyAt>
__device__ void sample_spread_body(const SampleArgs& a, RowSel* sel, u64* cand, u32 t, u32 bpr,
                                   int ib, int tb, KeyAt key_at) {
  constexpr int THREADS = 256;
  const u64 i = blockIdx.x / bpr;
  const u32 b = blockIdx.x % bpr;
  if (i >= list_len(a.list, a.rows)) return;
  const u64 r = list_row(a.list, i);
  const u64 key = mix64(a.seed ^ mix64(((u64)a.attempt << 40) ^ r));
  const u64 base = (u64)b * THREADS * PER;
  const u32 count = (u32)min((u64)THREADS * PER, a.s - base);
  u64 c[PER];
#pragma unroll
  for (int p = 0; p < PER; ++p) {
    const u32 slot = threadIdx.x + p * THREADS;
    c[p] = 0;
    if (slot < count) {
      const u64 idx = permute(base + slot, a.n, a.half_bits, key);
      c[p] = (u64)composite(key_at(r, idx), idx, a.n, ib);
    }
  }
  u64* row_cand = cand + (u64)r * bpr * t;
  u64* mine = row_cand + (u64)b * t;
  if (count <= t) {
    for (u32 j = threadIdx.x; j < t; j += THREADS) mine[j] = 0;
    __syncthreads();
#pragma unroll
    for (int p = 0; p < PER; ++p) {
      const u32 slot = threadIdx.x + p * THREADS;
      if (slot < count) mine[slot] = c[p];
    }
  } else {
    __shared__ u32 fill;
    if (threadIdx.x == 0) fill = 0;
    const u64 cut = block_kth_with<THREADS>(
        [&](auto f) {
#pragma unroll
          for (int p = 0; p < PER; ++p) f(c[p], threadIdx.x + p * THREADS < count);
        },
        t, tb, 0);
#pragma unroll
    for (int p = 0; p < PER; ++p)
      if (threadIdx.x + p * THREADS < count && c[p] >= cut) mine[atomicAdd(&fill, 1u)] = c[p];
  }
  if (!block_any_last(&sel[r].arrivals, bpr)) return;
  const u32 total = bpr * t;
  u64 d[SPREAD_SLOTS];
#pragma unroll
  for (int p = 0; p < SPREAD_SLOTS; ++p) {
    const u32 j = threadIdx.x + p * THREADS;
    d[p] = j < total ? __ldcg(row_cand + j) : 0;
  }
  const u64 tau = t <= ROUNDS_MAX ? block_kth_by_rounds<THREADS>(d, t)
                                  : block_kth_with<THREADS>(
                                        [&](auto f) {
#pragma unroll
                                          for (int p = 0; p < SPREAD_SLOTS; ++p)
                                            f(d[p], threadIdx.x + p * THREADS < total);
                                        },
                                        t, tb, 0);
  if (threadIdx.x == 0) {
    sel[r].tmin = tau;
    sel[r].arrivals = 0;
  }
}
