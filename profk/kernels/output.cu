// The output stage: the k selected of every row sorted into the requested order (composite keys for
// CUB's sorts, one row's runs of equal keys, a block sort a row, or ranking for few rows) and the
// gather of values and i64 indices.
#include <cooperative_groups.h>
#include <cub/block/block_radix_sort.cuh>
#include "rank_list.cuh"
#include "sample.cuh"

namespace cg = cooperative_groups;


// Sort keys of the k selected per row for the value-descending order: composite, fits 64 bits.
template <typename T>
__device__ void out_composite(const T* x, u64 n, u64 k, int mag, int ib, const u64* idx, u64* c,
                              u64 total) {
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (u64)gridDim.x * blockDim.x) {
    u64 r = i / k, j = idx[i];
    c[i] = (u64)composite(Ops<T>::key(x[r * n + j], mag), j, n, ib);
  }
}

// Keys alone, for composites wider than 64 bits (sorted after the indices by a stable sort).
template <typename T>
__device__ void out_keys(const T* x, u64 n, u64 k, int mag, const u64* idx, u32* keys, u64 total) {
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (u64)gridDim.x * blockDim.x) {
    u64 r = i / k;
    keys[i] = Ops<T>::key(x[r * n + idx[i]], mag);
  }
}

// Values and i64 indices of the sorted slots; `ib >= 0` means the slots hold composites to decode.
template <typename T>
__device__ void out_gather(const T* x, u64 n, u64 k, int ib, const u64* src, T* vals,
                           long long* out, u64 total) {
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (u64)gridDim.x * blockDim.x) {
    u64 r = i / k, s = src[i];
    u64 j = ib >= 0 ? n - 1 - (ib == 64 ? s : (s & ((1ull << ib) - 1))) : s;
    vals[i] = x[r * n + j];
    out[i] = (long long)j;
  }
}

// ---- Equal keys after a sort by key alone ----
// One row's value order sorts its k composites (key above, n-1-index below) by their key bits only:
// CUB's stable sort then runs half the passes of the whole composite. Equal keys are left in runs
// in the order the selection wrote them; two launches put each run in descending composite order,
// which is ascending index order, and the second writes the output.
// - tie_runs: a thread at each run's start sorts a run of up to TIE_SHORT. A tile of TIE_TILE
//   places that any longer run reaches is sorted whole into `tmp` by its block, and flagged.
// - tie_out: values and indices, where in flagged tiles each element of a long run is written at
//   its rank among the run's pieces in `tmp`, each sorted. Nearly always no tile is flagged; the
//   rank's cost grows with the pieces of a run, which the host bounds by bounding k.
#define TIE_THREADS 1024
#define TIE_ITEMS 4
#define TIE_TILE (TIE_THREADS * TIE_ITEMS)
#define TIE_SHORT 32

__device__ __forceinline__ bool same_key(u64 a, u64 b, int ib) { return (a >> ib) == (b >> ib); }

// Sorts s[i, j) descending by insertion, j - i <= TIE_SHORT.
__device__ void sort_short_run(u64* s, u64 i, u64 j) {
  u64 run[TIE_SHORT];
  const int len = (int)(j - i);
  for (int m = 0; m < len; ++m) {
    const u64 c = s[i + m];
    int at = m;
    for (; at > 0 && run[at - 1] < c; --at) run[at] = run[at - 1];
    run[at] = c;
  }
  for (int m = 0; m < len; ++m) s[i + m] = run[m];
}

// s[0, total): one row's composites sorted by key descending. Reading a neighbour that another
// thread is reordering is safe: the reorder keeps every key, and a tile's sort into tmp keeps each
// key's places; only the long runs' places in tmp are read afterwards.
extern "C" __global__ void __launch_bounds__(TIE_THREADS)
    tie_runs(u64* s, u64* tmp, u32* tile_long, u64 total, int ib, int cb) {
  dependent_launch_entry();
  typedef cub::BlockRadixSort<u64, TIE_THREADS, TIE_ITEMS> Sort;
  __shared__ typename Sort::TempStorage sort;
  const int tid = threadIdx.x;
  for (u64 tile = blockIdx.x; tile * TIE_TILE < total; tile += gridDim.x) {
    const u64 t0 = tile * TIE_TILE, t1 = min(total, t0 + TIE_TILE);
    bool reaches_long = false;
    // Every place's composite and the one before it, loaded together: most places start no run.
    u64 here[TIE_ITEMS], before[TIE_ITEMS];
#pragma unroll
    for (int m = 0; m < TIE_ITEMS; ++m) {
      const u64 i = t0 + (u64)m * TIE_THREADS + tid;
      here[m] = i < t1 ? s[i] : 0;
      before[m] = i < t1 && i > 0 ? s[i - 1] : 0;
    }
#pragma unroll
    for (int m = 0; m < TIE_ITEMS; ++m) {
      const u64 i = t0 + (u64)m * TIE_THREADS + tid, v = here[m];
      if (i >= t1) break;
      u64 a = i;
      if (i == t0) {
        // The run that holds the tile's first place may have begun in the tile before.
        while (a > 0 && i - a <= TIE_SHORT && same_key(s[a - 1], v, ib)) --a;
      } else if (same_key(before[m], v, ib)) {
        continue;
      }
      u64 b = i + 1;
      while (b < total && b - a <= TIE_SHORT && same_key(s[b], v, ib)) ++b;
      if (b - a > TIE_SHORT)
        reaches_long = true;
      else if (a == i && b - i > 1)
        sort_short_run(s, i, b);
    }
    const int flagged = __syncthreads_or(reaches_long);
    if (flagged) {
      u64 keys[TIE_ITEMS];
#pragma unroll
      for (int m = 0; m < TIE_ITEMS; ++m) {
        const u64 p = t0 + (u64)tid * TIE_ITEMS + m;
        keys[m] = p < t1 ? s[p] : 0;  // a pad equal to a composite is the same bits
      }
      Sort(sort).SortDescending(keys, 0, cb);
#pragma unroll
      for (int m = 0; m < TIE_ITEMS; ++m) {
        const u64 p = t0 + (u64)tid * TIE_ITEMS + m;
        if (p < t1) tmp[p] = keys[m];
      }
      __syncthreads();
    }
    if (tid == 0) tile_long[tile] = flagged;
  }
}

// The first place of s[0, total) (keys descending) whose key is below `key`, or at most `key` when
// `inclusive`.
__device__ u64 key_bound(const u64* s, u64 total, u64 key, int ib, bool inclusive) {
  u64 lo = 0, hi = total;
  while (lo < hi) {
    const u64 mid = lo + (hi - lo) / 2;
    const u64 k = s[mid] >> ib;
    if (inclusive ? k > key : k >= key)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

// Values and i64 indices of one row's value order sorted by key alone, each run of equal keys in
// place.
// A flagged tile's sorted copy in `tmp` is final for every run inside the tile. Only the runs that
// hold its first and last places can cross its edges; their bounds are searched once a block. A
// crossing run of up to TIE_SHORT is final in `s`. Each element of a longer one takes its rank in
// the run: its place in its own piece, plus, for each other piece, loaded whole into shared memory,
// the count of that piece's composites above it. A thread's elements are consecutive and
// descending, so that count only grows from one to the next: a short walk, else a binary search
// from where the last one stopped.
template <typename T>
__device__ void tie_out(const u64* s, const u64* tmp, const u32* tile_long, u64 total, int ib,
                        const T* x, u64 n, T* vals, long long* out) {
  __shared__ u64 piece[TIE_TILE];
  __shared__ u64 edge[4];  // bounds of the runs holding the tile's first and last places
  const int tid = threadIdx.x;
  const u64 mask = (1ull << ib) - 1;
  auto emit = [&](u64 at, u64 c) {
    const u64 j = n - 1 - (c & mask);
    vals[at] = x[j];
    out[at] = (long long)j;
  };
  for (u64 tile = blockIdx.x; tile * TIE_TILE < total; tile += gridDim.x) {
    const u64 t0 = tile * TIE_TILE, t1 = min(total, t0 + TIE_TILE);
    if (!tile_long[tile]) {
      // Every place's composite, then every value, loaded before any is written.
      u64 c[TIE_ITEMS];
      T v[TIE_ITEMS];
#pragma unroll
      for (int m = 0; m < TIE_ITEMS; ++m) {
        const u64 i = t0 + (u64)m * TIE_THREADS + tid;
        c[m] = i < t1 ? s[i] : n - 1;  // a pad reads x[0]
      }
#pragma unroll
      for (int m = 0; m < TIE_ITEMS; ++m) v[m] = x[n - 1 - (c[m] & mask)];
#pragma unroll
      for (int m = 0; m < TIE_ITEMS; ++m) {
        const u64 i = t0 + (u64)m * TIE_THREADS + tid;
        if (i < t1) {
          vals[i] = v[m];
          out[i] = (long long)(n - 1 - (c[m] & mask));
        }
      }
      continue;
    }
    const u64 first_key = s[t0] >> ib, last_key = s[t1 - 1] >> ib;
    if (tid == 0) {
      edge[0] = key_bound(s, total, first_key, ib, true);
      edge[1] = key_bound(s, total, first_key, ib, false);
    } else if (tid == 32) {
      edge[2] = key_bound(s, total, last_key, ib, true);
      edge[3] = key_bound(s, total, last_key, ib, false);
    }
    __syncthreads();
    // Runs that cross the tile's edges and are longer than TIE_SHORT: 0 the first place's, 1 the
    // last's.
    const u64 fa = edge[0], fb = edge[1], la = edge[2], lb = edge[3];
    const bool first_long = (fa < t0 || fb > t1) && fb - fa > TIE_SHORT;
    const bool last_long = first_key != last_key && lb > t1 && lb - la > TIE_SHORT;
    u64 e[TIE_ITEMS], rank[TIE_ITEMS];
    int run[TIE_ITEMS];  // -1 placed already, else 0 or 1 as above
#pragma unroll
    for (int m = 0; m < TIE_ITEMS; ++m) {
      const u64 p = t0 + (u64)tid * TIE_ITEMS + m;
      run[m] = -1;
      if (p >= t1) continue;
      e[m] = tmp[p];
      const u64 key = e[m] >> ib;
      if (key == first_key && (fa < t0 || fb > t1)) {
        if (first_long) {
          run[m] = 0;
          rank[m] = p - max(fa, t0);
        } else {
          emit(p, s[p]);
        }
      } else if (key == last_key && lb > t1) {
        if (last_long) {
          run[m] = 1;
          rank[m] = p - la;
        } else {
          emit(p, s[p]);
        }
      } else {
        emit(p, e[m]);
      }
    }
    // The other pieces of each long run: the first run's before the tile (and after, when it covers
    // the tile), the last run's after.
    const u64 j_lo = first_long ? fa / TIE_TILE : tile + 1;
    const u64 j_hi = first_long && fb > t1 ? (fb - 1) / TIE_TILE
                     : last_long           ? (lb - 1) / TIE_TILE
                                           : tile;
    for (u64 j = j_lo; j <= j_hi; ++j) {
      if (j == tile) continue;
      const int r = j < tile || !last_long ? 0 : 1;
      const u64 ra = r ? la : fa, rb = r ? lb : fb;
      const u64 p0 = max(ra, j * TIE_TILE), p1 = min(rb, min(total, (j + 1) * TIE_TILE));
      const u64 len = p1 > p0 ? p1 - p0 : 0;
      __syncthreads();  // the previous piece's searches are done
      for (u64 p = tid; p < len; p += TIE_THREADS) piece[p] = tmp[p0 + p];
      __syncthreads();
      u64 l = 0;  // the piece's composites above this thread's last element
#pragma unroll
      for (int m = 0; m < TIE_ITEMS; ++m) {
        if (run[m] != r) continue;
        int walk = 0;
        while (l < len && piece[l] > e[m] && walk < 4) ++l, ++walk;
        if (walk == 4) {
          u64 h = len;
          while (l < h) {
            const u64 mid = l + (h - l) / 2;
            if (piece[mid] > e[m])
              l = mid + 1;
            else
              h = mid;
          }
        }
        rank[m] += l;
      }
    }
#pragma unroll
    for (int m = 0; m < TIE_ITEMS; ++m)
      if (run[m] >= 0) emit((run[m] ? la : fa) + rank[m], e[m]);
    __syncthreads();
  }
}

#define TIE_OUT(SUF, T)                                                                            \
  extern "C" __global__ void __launch_bounds__(TIE_THREADS)                                        \
      tie_out_##SUF(const u64* s, const u64* tmp, const u32* tile_long, u64 total, int ib,         \
                    const T* x, u64 n, T* vals, long long* out) {                                  \
    dependent_launch_entry();                                                                      \
    tie_out<T>(s, tmp, tile_long, total, ib, x, n, vals, out);                                     \
  }
TIE_OUT(f32, float)


// Sort and gather in one launch for k <= THREADS * ITEMS: one block per row sorts the row's slots
// in registers (by composite descending, or by index) and writes values and i64 indices. `comps`,
// when the selection wrote it, holds each slot's composite: no gather for the descending keys.
template <typename T, int THREADS, int ITEMS>
__device__ void sort_gather(const T* x, u64 n, u64 k, u64 rows, int mag, int ib, int kb, int desc,
                            const u64* slots, T* vals, long long* out, const u64* comps) {
  typedef cub::BlockRadixSort<u64, THREADS, ITEMS> Sort;
  __shared__ typename Sort::TempStorage tmp;
  const u64 mask = ib >= 64 ? ~0ull : ((1ull << ib) - 1);
  for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
    u64 keys[ITEMS];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const u64 j = (u64)threadIdx.x * ITEMS + i;
      // Padding sorts after every slot (the sort is stable, so even an equal key stays behind).
      keys[i] = desc ? 0 : ~0ull;
      if (j < k) {
        const u64 idx = slots[r * k + j];
        keys[i] = !desc  ? idx
                  : comps ? comps[r * k + j]
                          : (u64)composite(Ops<T>::key(x[r * n + idx], mag), idx, n, ib);
      }
    }
    if (desc)
      Sort(tmp).SortDescending(keys, 0, kb + ib);
    else
      Sort(tmp).Sort(keys, 0, ib > 0 ? ib : 1);
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const u64 j = (u64)threadIdx.x * ITEMS + i;
      if (j < k) {
        const u64 idx = desc ? n - 1 - (keys[i] & mask) : keys[i];
        vals[r * k + j] = x[r * n + idx];
        out[r * k + j] = (long long)idx;
      }
    }
    __syncthreads();
  }
}

#define SORT_GATHER(SUF, T)                                                                        \
  extern "C" __global__ void __launch_bounds__(128)                                                \
      sort_gather_512_##SUF(const T* x, u64 n, u64 k, u64 rows, int mag, int ib, int kb, int desc, \
                            const u64* slots, T* vals, long long* out, const u64* comps) {         \
    dependent_launch_entry();                                                                      \
    sort_gather<T, 128, 4>(x, n, k, rows, mag, ib, kb, desc, slots, vals, out, comps);             \
  }                                                                                                \
  extern "C" __global__ void __launch_bounds__(256) sort_gather_1024_##SUF(                        \
      const T* x, u64 n, u64 k, u64 rows, int mag, int ib, int kb, int desc, const u64* slots,     \
      T* vals, long long* out, const u64* comps) {                                                 \
    dependent_launch_entry();                                                                      \
    sort_gather<T, 256, 4>(x, n, k, rows, mag, ib, kb, desc, slots, vals, out, comps);             \
  }                                                                                                \
  extern "C" __global__ void __launch_bounds__(256) sort_gather_2048_##SUF(                        \
      const T* x, u64 n, u64 k, u64 rows, int mag, int ib, int kb, int desc, const u64* slots,     \
      T* vals, long long* out, const u64* comps) {                                                 \
    dependent_launch_entry();                                                                      \
    sort_gather<T, 256, 8>(x, n, k, rows, mag, ib, kb, desc, slots, vals, out, comps);             \
  }                                                                                                \
  extern "C" __global__ void __launch_bounds__(256) sort_gather_4096_##SUF(                        \
      const T* x, u64 n, u64 k, u64 rows, int mag, int ib, int kb, int desc, const u64* slots,     \
      T* vals, long long* out, const u64* comps) {                                                 \
    dependent_launch_entry();                                                                      \
    sort_gather<T, 256, 16>(x, n, k, rows, mag, ib, kb, desc, slots, vals, out, comps);            \
  }

SORT_GATHER(f32, float)
SORT_GATHER(f16, __half)
SORT_GATHER(bf16, __nv_bfloat16)

// Sorted output of few rows in one launch, for rows too few to fill the device with one block per
// row:
// one block per slice of SLICE outputs. The block orders its slice by counting within it, then
// finds every order key of the row in the ordered slice by binary search; a histogram of those
// positions, summed, is how many keys precede each slice element, which is its place in the output.
// O(k log SLICE) work a block, no sort passes. Order keys are distinct (a composite, an index) and
// every place lies in [0, k) even if they were not, so no write leaves the output.
#define RANK_BATCH 8

// Larger order key = earlier in the output: the composite for values descending, the complement of
// the index for indices ascending.
template <typename T>
__device__ __forceinline__ u64 order_key(const T* row, u64 idx, u64 n, int mag, int ib, int desc) {
  return desc ? (u64)composite(Ops<T>::key(row[idx], mag), idx, n, ib) : ~idx;
}

// The RANK_BATCH order keys of a row starting at j0 (k of them), one a thread THREADS apart: every
// load is issued before any is used (the gathers are random reads).
template <typename T, int THREADS>
__device__ __forceinline__ void rank_batch(u64 (&c)[RANK_BATCH], u64 j0, u64 k, const u64* keyed,
                                           const u64* rs, const T* row, u64 n, int mag, int ib,
                                           int desc) {
#pragma unroll
  for (int b = 0; b < RANK_BATCH; ++b) {
    const u64 j = j0 + (u64)b * THREADS + threadIdx.x;
    c[b] = j < k ? (keyed ? keyed[j] : rs[j]) : 0;
  }
  if (!keyed) {
#pragma unroll
    for (int b = 0; b < RANK_BATCH; ++b) c[b] = order_key(row, c[b], n, mag, ib, desc);
  }
}

template <typename T, int SLICE, int THREADS>
__device__ void rank_gather(const T* x, u64 n, u64 k, u64 rows, int mag, int ib, int desc,
                            const u64* slots, T* vals, long long* out, const u64* comps) {
  static_assert(THREADS % SLICE == 0 && SLICE % 32 == 0, "slice shape");
  constexpr int PARTS = THREADS / SLICE;  // threads counting for one slice element
  __shared__ u64 slice[SLICE];
  __shared__ u64 ordered[SLICE];
  __shared__ u32 bucket[SLICE + 1];
  __shared__ u32 before[SLICE];
  __shared__ u32 warp_sum[SLICE / 32];
  const u32 t = threadIdx.x, lane = t & 31;
  const u64 parts = (k + SLICE - 1) / SLICE;
  const u64 mask = ib >= 64 ? ~0ull : ((1ull << ib) - 1);
  for (u64 item = blockIdx.x; item < rows * parts; item += gridDim.x) {
    const u64 r = item / parts, lo = (item % parts) * SLICE;
    const u32 s = (u32)min((u64)SLICE, k - lo);
    const T* row = x + r * n;
    const u64* rs = slots + r * k;
    // The selection's composites are the descending order's keys, read in order: no gather.
    const u64* keyed = desc && comps ? comps + r * k : nullptr;
    // The first batch of the row's keys is in flight while the slice is ordered.
    u64 c[RANK_BATCH];
    rank_batch<T, THREADS>(c, 0, k, keyed, rs, row, n, mag, ib, desc);
    if (t < s) slice[t] = keyed ? keyed[lo + t] : order_key(row, rs[lo + t], n, mag, ib, desc);
    if (t <= SLICE) bucket[t] = 0;
    if (t < SLICE) before[t] = 0;
    __syncthreads();
    {
      // PARTS threads count, each over its share of the slice, how many precede element e.
      const u32 e = t % SLICE, part = t / SLICE;
      if (e < s) {
        const u64 v = slice[e];
        u32 n_before = 0;
        for (u32 i = part; i < s; i += PARTS) {
          const u64 o = slice[i];
          n_before += o > v || (o == v && i < e);
        }
        if (n_before) atomicAdd(&before[e], n_before);
      }
    }
    __syncthreads();
    if (t < s) ordered[before[t]] = slice[t];
    __syncthreads();
    // m = how many slice elements are >= the key: the key precedes the slice elements from m on.
    // Lanes of a warp with the same m add once: slots often come in index order, and then nearly
    // every key of the row lands on the first or the last position of a slice.
    for (u64 j0 = 0; j0 < k; j0 += (u64)THREADS * RANK_BATCH) {
      if (j0) rank_batch<T, THREADS>(c, j0, k, keyed, rs, row, n, mag, ib, desc);
#pragma unroll
      for (int b = 0; b < RANK_BATCH; ++b) {
        const bool valid = j0 + (u64)b * THREADS + t < k;
        u32 m = 0;
#pragma unroll
        for (u32 step = SLICE; step; step >>= 1)
          if (m + step <= s && ordered[m + step - 1] >= c[b]) m += step;
        m = valid ? m : ~0u;
        count_bin(bucket, m);
      }
    }
    __syncthreads();
    // The place of ordered[t]: the keys counted at positions 0..t, an inclusive scan by warps.
    u32 place = 0;
    if (t < SLICE) {
      place = bucket[t];
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const u32 y = __shfl_up_sync(0xffffffffu, place, o);
        if ((int)lane >= o) place += y;
      }
      if (lane == 31) warp_sum[t / 32] = place;
    }
    __syncthreads();
    if (t < s) {
      for (u32 w = 0; w < t / 32; ++w) place += warp_sum[w];
      const u64 c0 = ordered[t];
      const u64 idx = desc ? n - 1 - (c0 & mask) : ~c0;
      vals[r * k + place] = row[idx];
      out[r * k + place] = (long long)idx;
    }
    __syncthreads();
  }
}

// Slices of 128 by 512 threads, of 64 by 1024 (and by 512, to time both).
#define RANK_GATHER_ONE(NAME, T, SLICE, THREADS)                                                   \
  extern "C" __global__ void __launch_bounds__(THREADS)                                            \
      NAME(const T* x, u64 n, u64 k, u64 rows, int mag, int ib, int desc, const u64* slots,        \
           T* vals, long long* out, const u64* comps) {                                            \
    dependent_launch_entry();                                                                      \
    rank_gather<T, SLICE, THREADS>(x, n, k, rows, mag, ib, desc, slots, vals, out, comps);         \
  }
#define RANK_GATHER(SUF, T)                              \
  RANK_GATHER_ONE(rank_gather_##SUF, T, 128, 512)        \
  RANK_GATHER_ONE(rank_gather_s64_##SUF, T, 64, 1024)    \
  RANK_GATHER_ONE(rank_gather_s64_t512_##SUF, T, 64, 512)

RANK_GATHER(f32, float)
RANK_GATHER(f16, __half)
RANK_GATHER(bf16, __nv_bfloat16)

#define OUT_KERNELS(SUF, T)                                                                        \
  extern "C" __global__ void out_composite_##SUF(const T* x, u64 n, u64 k, int mag, int ib,        \
                                                 const u64* idx, u64* c, u64 total) {              \
    dependent_launch_entry();                                                                      \
    out_composite<T>(x, n, k, mag, ib, idx, c, total);                                             \
  }                                                                                                \
  extern "C" __global__ void out_keys_##SUF(const T* x, u64 n, u64 k, int mag, const u64* idx,     \
                                            u32* keys, u64 total) {                                \
    dependent_launch_entry();                                                                      \
    out_keys<T>(x, n, k, mag, idx, keys, total);                                                   \
  }                                                                                                \
  extern "C" __global__ void out_gather_##SUF(const T* x, u64 n, u64 k, int ib, const u64* src,    \
                                              T* vals, long long* out, u64 total) {                \
    dependent_launch_entry();                                                                      \
    out_gather<T>(x, n, k, ib, src, vals, out, total);                                             \
  }

OUT_KERNELS(f32, float)
OUT_KERNELS(f16, __half)
OUT_KERNELS(bf16, __nv_bfloat16)
