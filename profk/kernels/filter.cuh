// The filter's compaction and count check, shared by the plain filter (filter.cu) and the fused
// accumulate-and-filter pass (accumulate.cu). An argument record `A` provides run, cap, bkeys,
// bidx, k, approximate and last_attempt.
#pragma once
#include "common.cuh"

#define FT 512
#define UNROLL 4
#define SCAP 2048

// Kept elements of one block and chunk, flushed to the row's buffer with one global atomic.
// Warps reserve ranges with a shared-memory atomic; a warp whose range would pass SCAP writes
// directly (its own global atomic) and records where the valid staged prefix ends.
struct Stage {
  u32 keys[SCAP];
  u64 idx[SCAP];
  u32 count, valid;
  u32 kmax;  // the largest key kept since the last flush
  u64 base;
};

// Writes the staged elements to row r's buffer and raises the row's largest kept key
// (RowRun.max_key:
// with the threshold it bounds the buffer's keys, so its selection skips the leading bits they
// share).
// With `bins`, the block's histogram of what it kept (`sbins`, shared) is added to the row's and
// cleared.
template <typename A>
__device__ void flush(Stage& st, const A& a, u64 r, u32* sbins = nullptr, u32* bins = nullptr) {
  __syncthreads();
  if (threadIdx.x == 0 && st.kmax) atomicMax(&a.run[r].max_key, st.kmax);
  if (bins) {
    for (u32 b = threadIdx.x; b < FILTER_BINS; b += blockDim.x) {
      const u32 c = sbins[b];
      if (c) {
        atomicAdd(&bins[b], c);
        sbins[b] = 0;
      }
    }
  }
  u32 n = min(st.count, st.valid);
  if (n) {
    if (threadIdx.x == 0) st.base = atomicAdd(&a.run[r].counter, (u64)n);
    __syncthreads();
    for (u32 i = threadIdx.x; i < n; i += blockDim.x) {
      u64 pos = st.base + i;
      if (pos < a.cap) {
        a.bkeys[r * a.cap + pos] = st.keys[i];
        a.bidx[r * a.cap + pos] = st.idx[i];
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    st.count = 0;
    st.valid = SCAP;
    st.kmax = 0;
  }
  __syncthreads();
}

// Warp-aggregated compaction of one tile: an inclusive scan of the per-thread counts over the warp
// gives every kept element its slot in one reserved range. Bit e of `keep` marks lane e of the
// thread; index(e) gives its row-local index and key(j) its key (reloaded: the line is still
// cached).
// With `sbins`, each kept key is counted in its bin above the threshold's key `tk` (filter_bin).
template <typename A, typename KeyAt, typename IdxAt>
__device__ __forceinline__ void warp_commit(Stage& st, const A& a, u64 r, u32 keep, KeyAt key,
                                            IdxAt index, u32* sbins = nullptr, u32 tk = 0) {
  const unsigned FULL = 0xffffffffu, lane = threadIdx.x & 31;
  u32 cnt = __popc(keep);
  if (!__any_sync(FULL, cnt)) return;
  u32 incl = cnt;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    u32 y = __shfl_up_sync(FULL, incl, o);
    if ((int)lane >= o) incl += y;
  }
  u32 total = __shfl_sync(FULL, incl, 31);
  u32 base = 0;
  if (lane == 31) base = atomicAdd(&st.count, total);
  base = __shfl_sync(FULL, base, 31);
  const bool direct = base + total > SCAP;
  u64 gbase = 0;
  if (direct) {
    if (lane == 31) {
      atomicMin(&st.valid, base);
      gbase = atomicAdd(&a.run[r].counter, (u64)total);
    }
    gbase = __shfl_sync(FULL, gbase, 31);
  }
  u32 o = incl - cnt, kmax = 0;
  // Kept elements are rare: walk the set bits (runtime lane numbers, no register arrays indexed).
  while (keep) {
    const int e = __ffs(keep) - 1;
    keep &= keep - 1;
    {
      u64 j = index(e);
      u32 k = key(j);
      kmax = max(kmax, k);
      if (sbins) atomicAdd(&sbins[filter_bin(k - tk)], 1u);
      if (direct) {
        u64 pos = gbase + o;
        if (pos < a.cap) {
          a.bkeys[r * a.cap + pos] = k;
          a.bidx[r * a.cap + pos] = j;
        }
      } else {
        st.keys[base + o] = k;
        st.idx[base + o] = j;
      }
      ++o;
    }
  }
  kmax = __reduce_max_sync(FULL, kmax);
  if (lane == 0 && kmax) atomicMax(&st.kmax, kmax);
}

// The count check k <= R <= M of row r, by the last of `arrivals` work items to reach it: records R
// and the outcome (ok, redraw, or fallback after the last attempt) for the launches that follow.
// With `lists`, the block that records the last of the pass's `listed` rows then lists all `rows`
// rows by status (classify_body), so no launch of its own is needed for it. An attempt that fails
// clears the row's histogram `bins` for the next.
template <typename A>
__device__ __forceinline__ void finish_row(const A& a, u64 r, u32 arrivals, u32* lists = nullptr,
                                           u32* counts = nullptr, u64 listed = 0, u64 rows = 0,
                                           u32* bins = nullptr) {
  __shared__ bool classify, failed;
  if (threadIdx.x == 0) classify = failed = false;
  const bool last = block_any_last(&a.run[r].arrivals, arrivals);
  if (last && threadIdx.x == 0) {
    __threadfence();
    RowRun& rr = a.run[r];
    u64 R = ld_l2(&rr.counter);
    bool recall = R < a.k, over = R > a.cap;
    rr.retained = R;
    rr.attempts += 1;
    rr.recall_fail += recall;
    rr.overflow += over;
    bool ok = a.approximate ? !recall : (!recall && !over);
    failed = !ok;
    if (ok) {
      rr.status = ROW_OK;
    } else {
      rr.counter = 0;
      rr.max_key = 0;
      rr.status = a.last_attempt ? ROW_FALLBACK : ROW_PENDING;
    }
    rr.arrivals = 0;
    if (lists) {
      __threadfence();
      classify = atomicAdd(&a.g->rows_finished, 1ull) == listed - 1;
    }
  }
  if (bins && last) {
    __syncthreads();
    if (failed)
      for (u32 b = threadIdx.x; b < FILTER_BINS; b += blockDim.x) bins[b] = 0;
  }
  if (!lists) return;
  __syncthreads();
  if (classify) {
    __threadfence();
    classify_body(a.run, rows, lists, counts);
    if (threadIdx.x == 0) a.g->rows_finished = 0;
  }
}
