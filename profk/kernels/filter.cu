// Stage 3 of Prof-K: one pass over every row that still needs an attempt. 16-byte loads; the elements
// at or above the row's threshold composite are compacted in index order within a tile by a block
// prefix sum, staged in shared memory, and flushed with one atomic per block and chunk on the row's
// counter. The counter is advanced by every kept element while the stores stop at the capacity M, so
// it ends at the exact R even on overflow. The last block of a row runs the check k <= R <= M on the
// device and records the outcome: the next attempt, the buffer selection and the fallback read it,
// so no host synchronization is needed.
#include <cub/block/block_scan.cuh>
#include "common.cuh"

#define FT 512
#define UNROLL 4
#define SCAP 2048

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
};

struct Stage {
  u32 keys[SCAP];
  u64 idx[SCAP];
  u32 count;
  u64 base;
};

__device__ void flush(Stage& st, const FilterArgs& a, u64 r) {
  __syncthreads();
  if (st.count) {
    if (threadIdx.x == 0) st.base = atomicAdd(&a.run[r].counter, (u64)st.count);
    __syncthreads();
    for (u32 i = threadIdx.x; i < st.count; i += blockDim.x) {
      u64 pos = st.base + i;
      if (pos < a.cap) {
        a.bkeys[r * a.cap + pos] = st.keys[i];
        a.bidx[r * a.cap + pos] = st.idx[i];
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) st.count = 0;
  }
  __syncthreads();
}

template <typename T>
__device__ void filter_body(const FilterArgs& a) {
  typedef Ops<T> O;
  const int VEC = O::VEC;
  const int PER = UNROLL * VEC;
  typedef cub::BlockScan<u32, FT> Scan;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ Stage st;
  if (threadIdx.x == 0) st.count = 0;
  __syncthreads();
  const u64 ib_mask = a.ib >= 64 ? ~0ull : ((1ull << a.ib) - 1);
  for (u64 item = blockIdx.x; item < a.rows * a.cpr; item += gridDim.x) {
    const u64 r = item / a.cpr, ch = item % a.cpr;
    if (a.run[r].status != ROW_PENDING) continue;
    u128 tau = a.use_tmin ? (u128)a.sel[r].tmin : load_prefix(a.sel[r]);
    const u32 tk = (u32)(tau >> a.ib);
    const u64 tidx = a.n - 1 - ((u64)tau & ib_mask);  // keep key > tk, or key == tk and index <= tidx
    const T* row = (const T*)a.x + r * a.n;
    const u64 mis = ((unsigned long long)row / sizeof(T)) % VEC;
    const u64 head = mis ? (VEC - mis < a.n ? VEC - mis : a.n) : 0;
    const u64 nvec = (a.n - head) / VEC;
    const u64 tail0 = head + nvec * VEC;
    u64 nan_c = 0, nan_first = ~0ull;

    // Commits this thread's kept elements (bit e of `keep`: element e of keys/idx) for one tile.
    auto commit = [&](u32 cnt, u32 keep, const u32* keys, u64 idx0, u64 stride_e) {
      u32 off, total;
      Scan(scan_tmp).ExclusiveSum(cnt, off, total);
      __syncthreads();
      if (!total) return;
      if (st.count + total > SCAP) flush(st, a, r);
      bool direct = total > SCAP;
      if (direct) {
        if (threadIdx.x == 0) st.base = atomicAdd(&a.run[r].counter, (u64)total);
        __syncthreads();
      }
      u32 o = off;
      for (int e = 0; e < PER; ++e) {
        if (!(keep >> e & 1)) continue;
        u64 j = idx0 + (u64)(e / VEC) * stride_e + (e % VEC);
        if (direct) {
          u64 pos = st.base + o;
          if (pos < a.cap) {
            a.bkeys[r * a.cap + pos] = keys[e];
            a.bidx[r * a.cap + pos] = j;
          }
        } else {
          st.keys[st.count + o] = keys[e];
          st.idx[st.count + o] = j;
        }
        ++o;
      }
      __syncthreads();
      if (!direct && threadIdx.x == 0) st.count += total;
      __syncthreads();
    };

    auto test = [&](T v, u64 j, u32& key) -> bool {
      if (a.count_nan && O::nan(v)) {
        ++nan_c;
        if (r * a.n + j < nan_first) nan_first = r * a.n + j;
      }
      key = O::key(v, a.mag);
      return key > tk || (key == tk && j <= tidx);
    };

    // Scalar head (first chunk) and tail (last chunk): at most VEC-1 elements each.
    auto scalar_tile = [&](u64 b0, u64 b1) {
      u32 keys[PER];
      u32 keep = 0, cnt = 0;
      u64 j = b0 + threadIdx.x;
      if (j < b1 && test(row[j], j, keys[0])) keep = 1, cnt = 1;
      commit(cnt, keep, keys, j, 0);
    };
    if (ch == 0 && head) scalar_tile(0, head);

    const u64 cv = a.chunk / VEC;
    const u64 v0 = ch * cv, v1 = v0 + cv < nvec ? v0 + cv : nvec;
    const typename O::Vec* vrow = (const typename O::Vec*)(row + head);
    for (u64 vb = v0; vb < v1; vb += (u64)FT * UNROLL) {
      typename O::Vec buf[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        u64 v = vb + (u64)u * FT + threadIdx.x;
        if (v < v1) buf[u] = __ldcs(&vrow[v]);
      }
      u32 keys[PER];
      u32 keep = 0, cnt = 0;
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        u64 v = vb + (u64)u * FT + threadIdx.x;
        if (v >= v1) continue;
        const T* e = (const T*)&buf[u];
#pragma unroll
        for (int q = 0; q < VEC; ++q) {
          if (test(e[q], head + v * VEC + q, keys[u * VEC + q])) {
            keep |= 1u << (u * VEC + q);
            ++cnt;
          }
        }
      }
      commit(cnt, keep, keys, head + (vb + threadIdx.x) * VEC, (u64)FT * VEC);
    }
    if (ch == a.cpr - 1 && tail0 < a.n) scalar_tile(tail0, a.n);
    flush(st, a, r);
    if (nan_c) {
      atomicAdd(&a.g->nan_count, nan_c);
      atomicMax(&a.g->nan_first, ~nan_first);  // stored inverted: zero means none
    }
    if (block_any_last(&a.run[r].arrivals, (u32)a.cpr) && threadIdx.x == 0) {
      __threadfence();
      RowRun& rr = a.run[r];
      u64 R = ld_l2(&rr.counter);
      bool recall = R < a.k, over = R > a.cap;
      rr.retained = R;
      rr.attempts += 1;
      rr.recall_fail += recall;
      rr.overflow += over;
      bool ok = a.approximate ? !recall : (!recall && !over);
      if (ok) {
        rr.status = ROW_OK;
      } else {
        rr.counter = 0;
        rr.status = a.last_attempt ? ROW_FALLBACK : ROW_PENDING;
      }
      rr.arrivals = 0;
    }
    __syncthreads();
  }
}

extern "C" __global__ void __launch_bounds__(FT, 2) filter_f32(FilterArgs a) { filter_body<float>(a); }
extern "C" __global__ void __launch_bounds__(FT, 2) filter_f16(FilterArgs a) { filter_body<__half>(a); }
extern "C" __global__ void __launch_bounds__(FT, 2) filter_bf16(FilterArgs a) { filter_body<__nv_bfloat16>(a); }
