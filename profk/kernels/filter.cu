// Stage 3 of Prof-K: one pass over every row that still needs an attempt. 16-byte loads; the
// elements at or above the row's threshold composite are compacted by warp-level prefix sums into a
// shared-memory staging area, and flushed with one atomic per block and chunk on the row's counter.
// The counter is advanced by every kept element while the stores stop at the capacity M, so it ends
// at the exact R even on overflow. The last block of a row runs the check k <= R <= M on the device
// and records the outcome: the next attempt, the buffer selection and the fallback read it, so no
// host synchronization is needed.
#include "filter.cuh"

struct FilterArgs {
  const void* x;
  u64 n, rows;
  int mag, ib, use_tmin, count_nan;
  u64 cap, k, chunk, cpr;
  const RowSel* sel;
  RowRun* run;
  u32* bkeys;
  u64* bidx;
  Global* g;
  int last_attempt, approximate;
  RowList list;  // the rows still pending (all rows on the first attempt)
  // where the pass lists the rows by status (3 x rows ids; null: a launch of its own)
  u32* lists;
  u32* counts;   // and how many in each
  u64 prefetch;  // bytes of its first item a block asks L2 for before the wait (first attempts)
  u32* bins;     // one row: FILTER_BINS counts of its kept keys by filter_bin (null: none kept)
};
static_assert(sizeof(FilterArgs) == 168,
              "FilterArgs: the size its Rust mirror (src/cuda/abi.rs) asserts");

// While the sample's threshold is still being selected, the first attempt's blocks are already
// resident (dependent launch) and the memory bus would idle: each asks L2 for the start of its
// first item. The input was final before the call's first kernel, and a prefetch is only a hint, so
// this may run before the wait on the kernel before.
template <typename T>
__device__ __forceinline__ void filter_prefetch(const FilterArgs& a) {
  if (a.prefetch == 0 || a.list.ids) return;
  const u64 item = blockIdx.x;
  if (item >= a.rows * a.cpr) return;
  const u64 r = item / a.cpr, first = item % a.cpr * a.chunk;
  if (first >= a.n) return;
  const u64 len = min(a.prefetch, min(a.chunk, a.n - first) * sizeof(T));
  const char* start = (const char*)((const T*)a.x + r * a.n + first);
  for (u64 off = (u64)threadIdx.x * 128; off < len; off += (u64)blockDim.x * 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(start + off));
}

template <typename T>
__device__ void filter_body(const FilterArgs& a) {
  typedef Ops<T> O;
  typedef typename O::Vec Vec;
  const int VEC = O::VEC;
  __shared__ Stage st;
  __shared__ u32 sbins[FILTER_BINS];
  if (threadIdx.x == 0) {
    st.count = 0;
    st.valid = SCAP;
    st.kmax = 0;
  }
  u32* const bins = a.bins;
  u32* const own = bins ? sbins : nullptr;
  if (bins)
    for (u32 b = threadIdx.x; b < FILTER_BINS; b += blockDim.x) sbins[b] = 0;
  __syncthreads();
  const u64 ib_mask = a.ib >= 64 ? ~0ull : ((1ull << a.ib) - 1);
  const u64 listed = list_len(a.list, a.rows), total_items = listed * a.cpr;
  if (listed == 0) {
    // No row to finish: the lists still have to be written, unchanged.
    if (blockIdx.x == 0 && a.lists) classify_body(a.run, a.rows, a.lists, a.counts);
    return;
  }
  for (u64 item = blockIdx.x; item < total_items;) {
    const u64 r = list_row(a.list, item / a.cpr), ch = item % a.cpr;
    const u128 tau = a.use_tmin ? (u128)a.sel[r].tmin : load_prefix(a.sel[r]);
    const u32 tk = (u32)(tau >> a.ib);
    // keep key > tk, or key == tk and index <= tidx
    const u64 tidx = a.n - 1 - ((u64)tau & ib_mask);
    const float tf = key_value<T>(tk, a.mag);
    const T* row = (const T*)a.x + r * a.n;
    const u64 mis = ((unsigned long long)row / sizeof(T)) % VEC;
    const u64 head = mis ? (VEC - mis < a.n ? VEC - mis : a.n) : 0;
    const u64 nvec = (a.n - head) / VEC;
    const u64 tail0 = head + nvec * VEC;
    u64 nan_c = 0, nan_first = ~0ull;

    // Scalar head (first chunk) and tail (last chunk): fewer than VEC elements each.
    for (int part = 0; part < 2; ++part) {
      u64 b0 = part == 0 ? 0 : tail0, b1 = part == 0 ? head : a.n;
      if ((part == 0 && ch != 0) || (part == 1 && ch != a.cpr - 1) || b0 >= b1) continue;
      u64 j = b0 + threadIdx.x;
      u32 bits = j < b1 ? O::raw1(row[j]) : 0, key = O::key_bits(bits, a.mag);
      bool keep = j < b1 && (key > tk || (key == tk && j <= tidx));
      if (j < b1 && a.count_nan && O::nan_bits(bits)) {
        ++nan_c;
        nan_first = min(nan_first, r * a.n + j);
      }
      warp_commit(st, a, r, keep, [&](u64) { return key; }, [&](int) { return j; }, own, tk);
    }

    const u64 cv = a.chunk / VEC;
    const u64 v0 = ch * cv, v1 = v0 + cv < nvec ? v0 + cv : nvec;
    const Vec* vrow = (const Vec*)(row + head);
    for (u64 vb = v0; vb < v1; vb += (u64)FT * UNROLL) {
      Vec buf[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        u64 v = vb + (u64)u * FT + threadIdx.x;
        buf[u] = v < v1 ? __ldcs(&vrow[v]) : Vec{};
      }
      const u64 j0 = head + (vb + threadIdx.x) * VEC;
      // The threshold plus an opaque zero (n < 2^63) drawn from every load of the round: no test
      // can run before the last load is issued. The compiler otherwise tested the first load's
      // elements before it issued the other three, and every round waited on memory twice.
      u32 loaded = 0;
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) loaded ^= O::raw(buf[u], 0);
      const float tf_all = __uint_as_float(__float_as_uint(tf) + (loaded & (u32)(a.n >> 63)));
      // Candidate test in the value domain, one comparison per element; candidates (rare) get the
      // exact composite test and the NaN count from their reloaded bits.
      u32 cand = 0;
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const bool valid = vb + (u64)u * FT + threadIdx.x < v1;
#pragma unroll
        for (int q = 0; q < VEC; ++q) {
          float v = O::value(buf[u], q);
          if (a.mag) v = fabsf(v);
          if (valid && !(v < tf_all)) cand |= 1u << (u * VEC + q);
        }
      }
      u32 keep = 0;
      for (u32 c = cand; c;) {
        const int e = __ffs(c) - 1;
        c &= c - 1;
        const u64 j = j0 + (u64)(e / VEC) * FT * VEC + (e % VEC);
        const u32 bits = O::raw1(row[j]);
        const u32 key = O::key_bits(bits, a.mag);
        if (key > tk || (key == tk && j <= tidx)) keep |= 1u << e;
        if (a.count_nan && O::nan_bits(bits)) {
          ++nan_c;
          nan_first = min(nan_first, r * a.n + j);
        }
      }
      warp_commit(
          st, a, r, keep, [&](u64 j) { return O::key_bits(O::raw1(row[j]), a.mag); },
          [&](int e) { return j0 + (u64)(e / VEC) * FT * VEC + (e % VEC); }, own, tk);
    }
    flush(st, a, r, own, bins);
    if (nan_c) {
      atomicAdd(&a.g->nan_count, nan_c);
      atomicMax(&a.g->nan_first, ~nan_first);  // stored inverted: zero means none
    }
    finish_row(a, r, (u32)a.cpr, a.lists, a.counts, listed, a.rows, bins);
    __syncthreads();
    item = next_item(item, a.cpr, false);
  }
}

extern "C" __global__ void __launch_bounds__(FT, 2) filter_f32(FilterArgs a) {
  filter_prefetch<float>(a);
  dependent_launch_entry();
  filter_body<float>(a);
}
extern "C" __global__ void __launch_bounds__(FT, 2) filter_f16(FilterArgs a) {
  filter_prefetch<__half>(a);
  dependent_launch_entry();
  filter_body<__half>(a);
}
extern "C" __global__ void __launch_bounds__(FT, 2) filter_bf16(FilterArgs a) {
  filter_prefetch<__nv_bfloat16>(a);
  dependent_launch_entry();
  filter_body<__nv_bfloat16>(a);
}
