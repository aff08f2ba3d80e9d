// Exact radix selection by (key, index) composite — the buffer top-k, the dense fallback and the
// `radix` baseline. The output stage is output.cu, the sorted lists of few rows rank_list.cu.
//
//
// A selection runs one launch per digit of 8 bits, most significant first. Each launch histograms
// the digit over the elements that still match the threshold prefix of their row; the last block to
// finish a row (arrival counter) picks the digit that contains the k-th largest and updates the
// row's prefix.
// Composites are distinct, so the final prefix selects exactly k elements, ties by lowest index.
// A row whose digit bucket is taken whole is done early: later launches skip it at once. The buffer
// top-k, the fallback and a large sample's threshold run every digit in one cooperative launch
// (select_all_*, select_kth_*), a grid barrier between digits: one launch, even when no row is
// listed.
#include <cooperative_groups.h>
#include <cub/block/block_radix_sort.cuh>
#include "rank_list.cuh"
#include "sample.cuh"

#define SEL_THREADS 256

namespace cg = cooperative_groups;

struct SelSrc {
  const void* x;
  u64 n;
  // bounded: a filter's buffer, its keys between the row's tmin and its run's max_key
  int bounded, mag;
  const u32* lkeys;   // list source when not null: keys and row-local indices, row stride lcap
  const u64* lidx;
  u64 lcap;
  const RowRun* lrun;  // list length min(lrun[r].counter, lcap); null: lcap
};
static_assert(sizeof(SelSrc) == 56, "SelSrc: the size its Rust mirror (src/cuda/abi.rs) asserts");

struct SelArgs {
  SelSrc src;
  u64 rows, chunk, cpr;
  int ib, lo, width, allow_done;
  RowSel* sel;
  u64* hist;
  RowList list;  // the rows taking part
};
static_assert(sizeof(SelArgs) == 128,
              "SelArgs: the size its Rust mirror (src/cuda/abi.rs) asserts");

template <typename T, bool LIST>
struct Src {
  static __device__ __forceinline__ u64 count(const SelSrc& s, u64 r) {
    if (!LIST) return s.n;
    if (!s.lrun) return s.lcap;
    u64 c = s.lrun[r].counter;
    return c < s.lcap ? c : s.lcap;
  }
  static __device__ __forceinline__ u128 comp(const SelSrc& s, u64 r, u64 j, int ib,
                                              bool need_idx) {
    if (LIST) {
      u32 key = s.lkeys[r * s.lcap + j];
      u64 idx = need_idx ? s.lidx[r * s.lcap + j] : s.n - 1;
      return composite(key, idx, s.n, ib);
    } else {
      u32 key = Ops<T>::key(((const T*)s.x)[r * s.n + j], s.mag);
      return composite(key, j, s.n, ib);
    }
  }
  static __device__ __forceinline__ u64 index(const SelSrc& s, u64 r, u64 j) {
    return LIST ? s.lidx[r * s.lcap + j] : j;
  }
};


// A cooperative selection of at most LOCAL_ROWS rows keeps their states in every block's shared
// memory: after each grid barrier every block reads the digit's histogram and picks the same digit,
// so no block waits on a last arrival and a row needs no global state until the end. The histograms
// rotate over three sets (after the rows' own, a.hist + a.rows * 256): the set a pass fills was
// cleared two barriers before, after every block had read it.
#define LOCAL_ROWS 4

// A row's state at the start of a selection of its kth largest.
__device__ __forceinline__ RowSel fresh_sel(u64 kth) {
  RowSel s = {};
  s.kleft = kth;
  s.tmin = ~0ull;
  return s;
}

// The row's threshold: from the block's local state when the selection kept one, else the row's
// state.
__device__ __forceinline__ u128 threshold_of(const SelArgs& a, const RowSel* ls, u64 i, u64 r) {
  return load_prefix(ls ? ls[i] : a.sel[r]);
}

// Suffix sums of histogram h (the digit of `width` bits at `lo`) give the digit holding s's
// kleft-th largest: s's prefix gains it, kleft keeps what is left inside it, done says whether the
// selection ends there. Every thread of the block calls it; SEL_THREADS covers the 256 bins.
__device__ void pick_into(RowSel& s, const u64* h, int lo, int width, bool allow_done) {
  typedef cub::BlockScan<u64, SEL_THREADS> Scan;
  __shared__ typename Scan::TempStorage tmp;
  const int bins = 1 << width, t = threadIdx.x, digit = bins - 1 - t;
  const u64 mine = t < bins ? ld_l2(h + digit) : 0;
  u64 incl;
  Scan(tmp).InclusiveSum(mine, incl);
  const u64 kl = s.kleft;
  __syncthreads();
  if (t < bins && incl >= kl && incl - mine < kl) {
    const u64 rest = kl - (incl - mine);
    const u128 pre = load_prefix(s) | ((u128)(u32)digit << lo);
    s.pre_lo = (u64)pre;
    s.pre_hi = (u64)(pre >> 64);
    s.kleft = rest;
    s.done = lo == 0 || (allow_done && mine == rest);
  }
  __syncthreads();
}

// The last block of a row picks its digit, then clears the histogram and the arrivals for the next.
__device__ void pick_digit(const SelArgs& a, u64 r) {
  u64* h = a.hist + r * 256;
  RowSel& s = a.sel[r];
  pick_into(s, h, a.lo, a.width, a.allow_done);
  if (threadIdx.x < 256) h[threadIdx.x] = 0;
  if (threadIdx.x == 0) s.arrivals = 0;
}

// Counts digit [a.lo, a.lo + a.width) of chunk ch of row r, over the elements whose bits above the
// digit equal `top`, into the row's 256-bin histogram gh.
template <typename T, bool LIST>
__device__ void count_digit(const SelArgs& a, u64 r, u64 ch, u128 top, u64* gh) {
  __shared__ u32 sh[256];
  const bool need_idx = a.lo < a.ib;
  const int hb = a.lo + a.width;
  const u32 mask = (1u << a.width) - 1;
  for (int i = threadIdx.x; i < 256; i += blockDim.x) sh[i] = 0;
  __syncthreads();
  const u64 end = Src<T, LIST>::count(a.src, r);
  const u64 b0 = ch * a.chunk, b1 = b0 + a.chunk < end ? b0 + a.chunk : end;
  // Lanes of a warp that hit the same bin add once: a buffer's candidates share their leading
  // digits, and unaggregated they would all queue on one shared counter. Every lane of a warp runs
  // the same number of rounds so that the match sees all of them.
  const u64 span = b1 > b0 ? b1 - b0 : 0, rounds = (span + blockDim.x - 1) / blockDim.x;
  for (u64 q = 0; q < rounds; ++q) {
    const u64 j = b0 + q * blockDim.x + threadIdx.x;
    u32 bin = ~0u;
    if (j < b1) {
      const u128 c = Src<T, LIST>::comp(a.src, r, j, a.ib, need_idx);
      if ((c >> hb) == top) bin = (u32)(c >> a.lo) & mask;
    }
    count_bin(sh, bin);
  }
  __syncthreads();
  for (int i = threadIdx.x; i <= (int)mask; i += blockDim.x)
    if (sh[i]) atomicAdd(gh + i, (u64)sh[i]);
  __syncthreads();
}

template <typename T, bool LIST>
__device__ void pass_body(const SelArgs& a) {
  const u64 nrows = list_len(a.list, a.rows);
  for (u64 item = blockIdx.x; item < nrows * a.cpr;) {
    const u64 r = list_row(a.list, item / a.cpr), ch = item % a.cpr;
    if (a.sel[r].done) {
      item = next_item(item, a.cpr, true);
      continue;
    }
    count_digit<T, LIST>(a, r, ch, load_prefix(a.sel[r]) >> (a.lo + a.width), a.hist + r * 256);
    if (block_any_last(&a.sel[r].arrivals, (u32)a.cpr)) {
      __threadfence();
      pick_digit(a, r);
    }
    __syncthreads();
    item = next_item(item, a.cpr, false);
  }
}

// Threshold finalization for a selection stopped early: the smallest selected composite (fits 64
// bits).
template <typename T, bool LIST>
__device__ void tmin_body(const SelArgs& a, const RowSel* ls = nullptr) {
  const u64 nrows = list_len(a.list, a.rows);
  for (u64 item = blockIdx.x; item < nrows * a.cpr; item += gridDim.x) {
    const u64 r = list_row(a.list, item / a.cpr), ch = item % a.cpr;
    const u128 thr = threshold_of(a, ls, item / a.cpr, r);
    u64 end = Src<T, LIST>::count(a.src, r);
    u64 b0 = ch * a.chunk, b1 = b0 + a.chunk < end ? b0 + a.chunk : end;
    u64 best = ~0ull;
    for (u64 j = b0 + threadIdx.x; j < b1; j += blockDim.x) {
      u128 c = Src<T, LIST>::comp(a.src, r, j, a.ib, true);
      if (c >= thr && (u64)c < best) best = (u64)c;
    }
    if (best != ~0ull) atomicMin(&a.sel[r].tmin, best);
  }
}

// Appends `j` to `dst` and `c` (the low 64 bits of a composite) to `dst_c`, either may be null, for
// every lane with `take`, at the next free places (of `cap`), counted by `fill`: one atomic a warp.
// Every lane of the warp calls it.
__device__ __forceinline__ void warp_append(bool take, u64 c, u64 j, u64* fill, u64 cap, u64* dst,
                                            u64* dst_c) {
  const unsigned lane = threadIdx.x & 31, ballot = __ballot_sync(0xffffffffu, take);
  if (!ballot) return;
  const int leader = __ffs(ballot) - 1;
  u64 base = 0;
  if ((int)lane == leader) base = atomicAdd((unsigned long long*)fill, (u64)__popc(ballot));
  base = __shfl_sync(0xffffffffu, base, leader);
  const u64 pos = base + __popc(ballot & ((1u << lane) - 1));
  if (take && pos < cap) {
    if (dst) dst[pos] = j;
    if (dst_c) dst_c[pos] = c;
  }
}

// Writes the row-local index of every element at or above the row's threshold: exactly k per row;
// with `comps`, each one's composite (of at most 64 bits) at the same place, for the output's
// order.
template <typename T, bool LIST>
__device__ void compact_body(const SelArgs& a, u64* out, u64 k, RowRun* run, u64* comps,
                             const RowSel* ls = nullptr) {
  const u64 nrows = list_len(a.list, a.rows);
  for (u64 item = blockIdx.x; item < nrows * a.cpr; item += gridDim.x) {
    const u64 r = list_row(a.list, item / a.cpr), ch = item % a.cpr;
    const u128 thr = threshold_of(a, ls, item / a.cpr, r);
    u64 end = Src<T, LIST>::count(a.src, r);
    u64 b0 = ch * a.chunk, b1 = b0 + a.chunk < end ? b0 + a.chunk : end;
    // Every lane of a warp runs the same number of rounds so that the ballot sees all of them.
    u64 span = b1 > b0 ? b1 - b0 : 0;
    u64 rounds = (span + blockDim.x - 1) / blockDim.x;
    for (u64 q = 0; q < rounds; ++q) {
      u64 j = b0 + q * blockDim.x + threadIdx.x;
      const u128 c = j < b1 ? Src<T, LIST>::comp(a.src, r, j, a.ib, true) : 0;
      const bool take = j < b1 && c >= thr;
      const u64 idx = take ? Src<T, LIST>::index(a.src, r, j) : 0;
      warp_append(take, (u64)c, idx, &run[r].out_count, k, out + r * k,
                  comps ? comps + r * k : nullptr);
    }
  }
}

// The exact top-k of each listed row's buffer in one block (buffers of at most THREADS * BS_PER
// elements, composites of at most 64 bits): the kth-largest composite by block_kth, then every
// element at or above it written out, exactly k per row.
template <int THREADS>
__device__ void block_topk_body(const SelArgs& a, u64* out, u64 k, int tb, u64* comps) {
  __shared__ u32 fill;
  const u64 nrows = list_len(a.list, a.rows);
  for (u64 i = blockIdx.x; i < nrows; i += gridDim.x) {
    const u64 r = list_row(a.list, i);
    const u32 count = (u32)Src<float, true>::count(a.src, r);
    u64 c[BS_PER];
#pragma unroll
    for (int p = 0; p < BS_PER; ++p) {
      const u64 j = threadIdx.x + (u64)p * THREADS;
      c[p] = j < count ? (u64)Src<float, true>::comp(a.src, r, j, a.ib, true) : 0;
    }
    const u64 tau = block_kth<THREADS>(c, count, (u32)k, tb);
    if (threadIdx.x == 0) fill = 0;
    __syncthreads();
#pragma unroll
    for (int p = 0; p < BS_PER; ++p) {
      const u64 j = threadIdx.x + (u64)p * THREADS;
      if (j < count && c[p] >= tau) {
        u32 pos = atomicAdd(&fill, 1u);
        if (pos < k) {
          out[r * k + pos] = a.src.lidx[r * a.src.lcap + j];
          if (comps) comps[r * k + pos] = c[p];
        }
      }
    }
    __syncthreads();
  }
}

// The kth-largest composite of each listed row's list in one block (lists of at most THREADS *
// BS_PER elements, composites of at most 64 bits) into the row's tmin: the sample threshold of rows
// whose sample was drawn by a launch of its own (few rows: the draw then spreads over every SM).
template <int THREADS>
__device__ void block_kth_body(const SelArgs& a, u32 kth, int tb) {
  const u64 nrows = list_len(a.list, a.rows);
  for (u64 i = blockIdx.x; i < nrows; i += gridDim.x) {
    const u64 r = list_row(a.list, i);
    const u32 count = (u32)Src<float, true>::count(a.src, r);
    u64 c[BS_PER];
#pragma unroll
    for (int p = 0; p < BS_PER; ++p) {
      const u64 j = threadIdx.x + (u64)p * THREADS;
      c[p] = j < count ? (u64)Src<float, true>::comp(a.src, r, j, a.ib, true) : 0;
    }
    const u64 tau = block_kth<THREADS>(c, count, kth, tb);
    if (threadIdx.x == 0) a.sel[r].tmin = tau;
    __syncthreads();
  }
}

extern "C" __global__ void __launch_bounds__(1024) block_kth_list(SelArgs a, u32 kth, int tb) {
  dependent_launch_entry();
  block_kth_body<1024>(a, kth, tb);
}
extern "C" __global__ void __launch_bounds__(256) block_kth_list_small(SelArgs a, u32 kth, int tb) {
  dependent_launch_entry();
  block_kth_body<256>(a, kth, tb);
}

extern "C" __global__ void __launch_bounds__(1024)
    block_topk_list(SelArgs a, u64* out, u64 k, int tb, u64* comps) {
  dependent_launch_entry();
  block_topk_body<1024>(a, out, k, tb, comps);
}
extern "C" __global__ void __launch_bounds__(256)
    block_topk_list_small(SelArgs a, u64* out, u64 k, int tb, u64* comps) {
  dependent_launch_entry();
  block_topk_body<256>(a, out, k, tb, comps);
}

// Lists of the rows in each status (pending, ok, fallback) after a filter pass; one block.
extern "C" __global__ void __launch_bounds__(1024)
    classify_rows(const RowRun* run, u64 rows, u32* lists, u32* counts) {
  dependent_launch_entry();
  classify_body(run, rows, lists, counts);
}

// A whole selection in one cooperative launch: the reset of the listed rows, every digit pass and
// the compaction, with a grid barrier where separate launches had a kernel boundary. When the list
// is empty (the fallback's rows, nearly always) every block returns at once: one launch instead of
// ten.

// Resets the states of the listed rows, over the whole grid; a bounded list's rows keep their tmin
// (the filter's threshold), which every block reads to start its digits.
__device__ void reset_listed(const SelArgs& a, u64 nrows, u64 kth) {
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < nrows;
       i += (u64)gridDim.x * blockDim.x) {
    RowSel& s = a.sel[list_row(a.list, i)];
    const u64 tmin = s.tmin;
    s = fresh_sel(kth);
    if (a.src.bounded) s.tmin = tmin;
  }
}

// The state a bounded list's row starts from, and the bit its digits start at: every kept key lies
// between the threshold's key and the largest kept key, so the bits above the highest one where
// those two differ are known (the whole key when they are equal).
__device__ RowSel bounded_sel(const SelArgs& a, u64 r, u64 kth, int bits, int& start) {
  RowSel s = fresh_sel(kth);
  start = bits;
  if (!a.src.bounded) return s;
  const u32 lo_key = (u32)(a.sel[r].tmin >> a.ib), hi_key = a.src.lrun[r].max_key;
  if (hi_key < lo_key) return s;  // nothing kept above the threshold: no bound to use
  const int d = hi_key == lo_key ? -1 : 31 - __clz(lo_key ^ hi_key);
  const u128 known = d >= 31 ? 0 : (u128)(lo_key >> (d + 1)) << (d + 1 + a.ib);
  s.pre_lo = (u64)known;
  s.pre_hi = (u64)(known >> 64);
  start = d + 1 + a.ib;
  return s;
}

// The reset of the listed rows and every digit pass, for a grid of a cooperative launch whose list
// is not empty; returns after a grid barrier.
template <typename T, bool LIST>
__device__ void digits_in_one_launch(SelArgs& a, u64 kth, int bits, cg::grid_group& grid) {
  const u64 nrows = list_len(a.list, a.rows);
  reset_listed(a, nrows, kth);
  grid.sync();
  for (int hi = bits; hi > 0;) {
    const int lo = hi > 8 ? hi - 8 : 0;
    a.lo = lo;
    a.width = hi - lo;
    pass_body<T, LIST>(a);
    grid.sync();
    hi = lo;
  }
}

// digits_in_one_launch for at most LOCAL_ROWS listed rows, their states in `ls` (shared memory):
// the passes stop once every row is done, and block 0 leaves the final states in the rows' records.
template <typename T, bool LIST>
__device__ void digits_local(SelArgs& a, u64 nrows, u64 kth, int bits, cg::grid_group& grid,
                             RowSel* ls) {
  const u64 set = LOCAL_ROWS * 256, tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  const u64 threads = (u64)gridDim.x * blockDim.x;
  u64* sets = a.hist + a.rows * 256;
  for (u64 e = tid; e < 3 * set; e += threads) sets[e] = 0;
  // Every block reads the rows' thresholds before any block's reset could reach them: the reset
  // keeps a bounded row's tmin.
  __shared__ int starts[LOCAL_ROWS];
  if (threadIdx.x < nrows)
    ls[threadIdx.x] = bounded_sel(a, list_row(a.list, threadIdx.x), kth, bits, starts[threadIdx.x]);
  __syncthreads();
  int start = 0;
  for (u64 i = 0; i < nrows; ++i) start = max(start, starts[i]);
  reset_listed(a, nrows, kth);
  grid.sync();
  for (int hi = start, p = 0; hi > 0; ++p) {
    const int lo = hi > 8 ? hi - 8 : 0;
    a.lo = lo;
    a.width = hi - lo;
    u64* cur = sets + (p % 3) * set;
    u64* stale = sets + ((p + 1) % 3) * set;
    for (u64 e = tid; e < nrows * 256; e += threads) stale[e] = 0;
    for (u64 item = blockIdx.x; item < nrows * a.cpr; item += gridDim.x) {
      const u64 i = item / a.cpr;
      if (ls[i].done) continue;
      count_digit<T, LIST>(a, list_row(a.list, i), item % a.cpr, load_prefix(ls[i]) >> hi,
                           cur + i * 256);
    }
    grid.sync();
    bool all_done = true;
    for (u64 i = 0; i < nrows; ++i) {
      if (!ls[i].done) pick_into(ls[i], cur + i * 256, lo, hi - lo, a.allow_done);
      all_done = all_done && ls[i].done;
    }
    hi = lo;
    if (all_done) break;
  }
  // Not tmin: other blocks may already be lowering it.
  if (blockIdx.x == 0 && threadIdx.x < nrows) {
    RowSel& s = a.sel[list_row(a.list, threadIdx.x)];
    const RowSel& l = ls[threadIdx.x];
    s.pre_lo = l.pre_lo;
    s.pre_hi = l.pre_hi;
    s.kleft = l.kleft;
    s.done = l.done;
  }
}

// Composites of the bin holding the k-th largest that select_by_bins selects among: up to 16 a
// thread, staged in the last block's shared memory (32 KB).
#define BIN_EDGE_CAP (SEL_THREADS * 16)
// Keys a thread reads a round in select_by_bins' pass over the buffer.
#define BIN_ITEMS 4

// The buffer's top-k of one bounded row read off the filter's histogram of its kept keys
// (filter_bin): every element of a bin above the one holding the k-th largest is taken in one pass
// over the buffer, and that bin's elements, put aside, are selected by the last block to finish.
// Every block reads the histogram and takes the same way; where that bin holds more than
// BIN_EDGE_CAP (keys crowded near one value), or the histogram does not cover the buffer, it
// returns false having written nothing, and the digits run as without it. `bins`: the histogram
// (FILTER_BINS), then two counters; `edge`: room for the bin's composites (BIN_EDGE_CAP).
__device__ bool select_by_bins(const SelArgs& a, u64 r, u64 k, int bits, u64* out, RowRun* run,
                               u64* comps, u32* bins, u64* edge) {
  typedef cub::BlockScan<u32, SEL_THREADS> Scan;
  constexpr int PER = (FILTER_BINS + SEL_THREADS - 1) / SEL_THREADS;
  __shared__ typename Scan::TempStorage scan;
  __shared__ u32 s_bin, s_above, s_count;
  __shared__ u64 s_take, s_aside;
  const u32* h = bins;
  u64* const fill = (u64*)(bins + FILTER_BINS);  // the bin's composites put aside so far
  u32* const arrived = bins + FILTER_BINS + 2;
  const u64 total = a.src.lrun[r].counter;
  if (total > a.src.lcap || total < k || k == 0) return false;
  const int t = threadIdx.x;
  if (t == 0) s_count = ~0u;  // no bin found: the histogram holds fewer than k
  __syncthreads();
  u32 own[PER];
  const u32 sum = bins_from_top(h, own);
  u32 incl;
  Scan(scan).InclusiveSum(sum, incl);
  if (incl - sum < k && incl >= k) {
    u32 above = incl - sum;
    bool found = false;
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      if (!found && above + own[i] >= k) {
        s_bin = (u32)(FILTER_BINS - 1 - (t * PER + i));
        s_above = above;
        s_count = own[i];
        found = true;
      }
      if (!found) above += own[i];
    }
  }
  __syncthreads();
  const u32 edge_bin = s_bin, above = s_above, edge_count = s_count;
  if (edge_count > BIN_EDGE_CAP) return false;
  const u32 tk = (u32)(a.sel[r].tmin >> a.ib);
  const u64 n = a.src.n;
  u64* const dst = out + r * k;
  u64* const dst_c = comps ? comps + r * k : nullptr;
  // Each round a block reads BIN_ITEMS keys a thread, all loads in flight at once, and claims room
  // for its taken and its set-aside elements with one atomic on each of the grid's two counters.
  for (u64 item = blockIdx.x; item < a.cpr; item += gridDim.x) {
    const u64 b0 = item * a.chunk, b1 = min(b0 + a.chunk, total);
    for (u64 base = b0; base < b1; base += SEL_THREADS * BIN_ITEMS) {
      u32 key[BIN_ITEMS], kind[BIN_ITEMS];
      u64 idx[BIN_ITEMS];
#pragma unroll
      for (int i = 0; i < BIN_ITEMS; ++i) {
        const u64 j = base + i * SEL_THREADS + t;
        key[i] = j < b1 ? a.src.lkeys[r * a.src.lcap + j] : 0;
      }
      u32 counts = 0;  // taken in the low half, set aside in the high half
#pragma unroll
      for (int i = 0; i < BIN_ITEMS; ++i) {
        const u64 j = base + i * SEL_THREADS + t;
        const u32 bin = filter_bin(key[i] - tk);
        kind[i] = j >= b1 ? 0 : bin > edge_bin ? 1 : bin == edge_bin ? 2 : 0;
        counts += kind[i] == 1 ? 1u : kind[i] == 2 ? 1u << 16 : 0u;
      }
#pragma unroll
      for (int i = 0; i < BIN_ITEMS; ++i) {
        const u64 j = base + i * SEL_THREADS + t;
        idx[i] = kind[i] ? a.src.lidx[r * a.src.lcap + j] : 0;
      }
      u32 before, all;
      Scan(scan).ExclusiveSum(counts, before, all);
      if (t == 0) {
        s_take = all & 0xffffu
                     ? atomicAdd((unsigned long long*)&run[r].out_count, (u64)(all & 0xffffu))
                     : 0;
        s_aside = all >> 16 ? atomicAdd((unsigned long long*)fill, (u64)(all >> 16)) : 0;
      }
      __syncthreads();
      u64 at_take = s_take + (before & 0xffffu), at_aside = s_aside + (before >> 16);
#pragma unroll
      for (int i = 0; i < BIN_ITEMS; ++i) {
        const u64 c = (u64)composite(key[i], idx[i], n, a.ib);
        if (kind[i] == 1) {
          if (at_take < k) {
            dst[at_take] = idx[i];
            if (dst_c) dst_c[at_take] = c;
          }
          ++at_take;
        } else if (kind[i] == 2) {
          if (at_aside < BIN_EDGE_CAP) edge[at_aside] = c;
          ++at_aside;
        }
      }
      __syncthreads();  // the scan's storage and the claimed bases are reused next round
    }
  }
  if (!block_any_last(arrived, gridDim.x)) return true;
  // The last block: the (k - above)-th largest of the bin's composites, staged in shared memory,
  // whose keys share the bits above the highest one where the bin's smallest and largest keys
  // differ.
  __shared__ u64 staged[BIN_EDGE_CAP];
  const u32 count = min(edge_count, (u32)BIN_EDGE_CAP);
  constexpr int PER_THREAD = BIN_EDGE_CAP / SEL_THREADS;
#pragma unroll 4
  for (int i = 0; i < PER_THREAD; ++i) {
    const u32 e = i * SEL_THREADS + t;
    staged[e] = e < count ? __ldcg(&edge[e]) : 0;
  }
  __syncthreads();
  u64 dlo, dhi;
  filter_bin_range(edge_bin, dlo, dhi);
  const u64 klo = tk + dlo, khi = min(tk + dhi, (u64)0xffffffffu);
  const int d = klo == khi ? -1 : 63 - __clzll(klo ^ khi);
  const int hi = d + 1 + a.ib;
  const u64 prefix = d >= 31 ? 0 : (klo >> (d + 1)) << (d + 1 + a.ib);
  const u64 cut = block_kth_with<SEL_THREADS>(
      [&](auto f) {
#pragma unroll 4
        for (int i = 0; i < PER_THREAD; ++i) {
          const u32 e = i * SEL_THREADS + t;
          f(staged[e], e < count);
        }
      },
      (u32)(k - above), min(hi, bits), prefix, true);
  u32 mine = 0;
#pragma unroll 1
  for (int i = 0; i < PER_THREAD; ++i) {
    const u32 e = i * SEL_THREADS + t;
    mine += e < count && staged[e] >= cut;
  }
  u32 before, all;
  __syncthreads();
  Scan(scan).ExclusiveSum(mine, before, all);
  if (t == 0) s_take = atomicAdd((unsigned long long*)&run[r].out_count, (u64)all);
  __syncthreads();
  const u64 mask = a.ib >= 64 ? ~0ull : (1ull << a.ib) - 1;
  u64 at = s_take + before;
#pragma unroll 1
  for (int i = 0; i < PER_THREAD; ++i) {
    const u32 e = i * SEL_THREADS + t;
    const u64 c = staged[e];
    if (e < count && c >= cut) {
      if (at < k) {
        dst[at] = n - 1 - (c & mask);
        if (dst_c) dst_c[at] = c;
      }
      ++at;
    }
  }
  return true;
}

template <typename T, bool LIST>
__device__ void select_all_body(SelArgs a, u64 kth, int bits, u64* out, u64 k, RowRun* run,
                                u64* comps) {
  const u64 nrows = list_len(a.list, a.rows);
  if (nrows == 0) return;
  cg::grid_group grid = cg::this_grid();
  if (nrows <= LOCAL_ROWS) {
    __shared__ RowSel ls[LOCAL_ROWS];
    digits_local<T, LIST>(a, nrows, kth, bits, grid, ls);
    compact_body<T, LIST>(a, out, k, run, comps, ls);
    return;
  }
  digits_in_one_launch<T, LIST>(a, kth, bits, grid);
  compact_body<T, LIST>(a, out, k, run, comps);
}

// select_all_body, read off the filter's histogram where a bounded list comes with one (`bins`,
// with room `edge`: see select_by_bins) and it serves.
template <typename T, bool LIST>
__device__ void select_all_or_bins(const SelArgs& a, u64 kth, int bits, u64* out, u64 k,
                                   RowRun* run, u64* comps, u32* bins, u64* edge) {
  if (LIST && bins && a.src.bounded && bits <= 64 && list_len(a.list, a.rows) == 1 &&
      select_by_bins(a, list_row(a.list, 0), k, bits, out, run, comps, bins, edge))
    return;
  select_all_body<T, LIST>(a, kth, bits, out, k, run, comps);
}

// The kth-largest composite of every listed row in one cooperative launch: its prefix in the row's
// state, and with an early stop allowed (composites of at most 64 bits) the smallest selected one
// in its tmin. A sample too large for one block takes this path. `before()` runs first in every
// block (the sample's draw, when the same launch draws it): the first grid barrier orders it before
// the digits.
template <typename T, bool LIST, typename Before>
__device__ void select_kth_body(SelArgs a, u64 kth, int bits, Before before) {
  const u64 nrows = list_len(a.list, a.rows);
  if (nrows == 0) return;
  before();
  cg::grid_group grid = cg::this_grid();
  if (nrows <= LOCAL_ROWS) {
    __shared__ RowSel ls[LOCAL_ROWS];
    digits_local<T, LIST>(a, nrows, kth, bits, grid, ls);
    if (a.allow_done) tmin_body<T, LIST>(a, ls);
    return;
  }
  digits_in_one_launch<T, LIST>(a, kth, bits, grid);
  if (a.allow_done) tmin_body<T, LIST>(a);
}

extern "C" __global__ void select_init(RowSel* sel, u64* hist, u64 rows, u64 kleft) {
  dependent_launch_entry();
  u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < rows) sel[i] = fresh_sel(kleft);
}

#define SEL_KERNELS(SUF, T, LIST)                                                                  \
  extern "C" __global__ void __launch_bounds__(SEL_THREADS) select_pass_##SUF(SelArgs a) {         \
    dependent_launch_entry();                                                                      \
    pass_body<T, LIST>(a);                                                                         \
  }                                                                                                \
  extern "C" __global__ void __launch_bounds__(SEL_THREADS) select_tmin_##SUF(SelArgs a) {         \
    dependent_launch_entry();                                                                      \
    tmin_body<T, LIST>(a);                                                                         \
  }                                                                                                \
  extern "C" __global__ void __launch_bounds__(SEL_THREADS)                                        \
      select_compact_##SUF(SelArgs a, u64* out, u64 k, RowRun* run, u64* comps) {                  \
    dependent_launch_entry();                                                                      \
    compact_body<T, LIST>(a, out, k, run, comps);                                                  \
  }                                                                                                \
  extern "C" __global__ void __launch_bounds__(SEL_THREADS)                                        \
      select_all_##SUF(SelArgs a, u64 kth, int bits, u64* out, u64 k, RowRun* run, u64* comps,     \
                       u32* bins, u64* edge) {                                                     \
    dependent_launch_entry();                                                                      \
    select_all_or_bins<T, LIST>(a, kth, bits, out, k, run, comps, bins, edge);                     \
  }                                                                                                \
  extern "C" __global__ void __launch_bounds__(SEL_THREADS)                                        \
      select_kth_##SUF(SelArgs a, u64 kth, int bits) {                                             \
    dependent_launch_entry();                                                                      \
    select_kth_body<T, LIST>(a, kth, bits, [] {});                                                 \
  }

// A sample's draw and its kth-largest in one cooperative launch (few rows, samples past one block).
#define SAMPLE_KTH(SUF, T)                                                                         \
  extern "C" __global__ void __launch_bounds__(SEL_THREADS)                                        \
      sample_kth_##SUF(SampleArgs s, SelArgs a, u64 kth, int bits) {                               \
    dependent_launch_entry();                                                                      \
    select_kth_body<float, true>(a, kth, bits, [&] {                                               \
      sample_body(                                                                                 \
          s, [&](u64 r, u64 idx) { return Ops<T>::key(((const T*)s.x)[r * s.n + idx], s.mag); });  \
    });                                                                                            \
  }

// The dense selection compiled apart (not inlined; it nearly always has no row), so that the
// buffer's selection beside it keeps the registers it has alone.
template <typename T>
__device__ __noinline__ void select_all_dense_apart(const SelArgs& a, u64 kth, int bits, u64* out,
                                                    u64 k, RowRun* run, u64* comps) {
  select_all_body<T, false>(a, kth, bits, out, k, run, comps);
}

// The buffer's top-k of the listed rows, then the dense selection of the rows that fell back (their
// list nearly always empty), in one cooperative launch: a grid barrier between the two when both
// have rows, as they share the histogram sets. Four blocks an SM, as the buffer's launch alone has.
template <typename T>
__device__ void select_all_then_dense(const SelArgs& a, u64 kth, int bits, u64* out, u64 k,
                                      RowRun* run, u64* comps, u32* bins, u64* edge,
                                      const SelArgs& dense) {
  const bool both = list_len(a.list, a.rows) && list_len(dense.list, dense.rows);
  select_all_or_bins<float, true>(a, kth, bits, out, k, run, comps, bins, edge);
  if (both) cg::this_grid().sync();
  select_all_dense_apart<T>(dense, kth, bits, out, k, run, comps);
}

#define SELECT_ALL_THEN_DENSE(SUF, T)                                                              \
  extern "C" __global__ void __launch_bounds__(SEL_THREADS, 4)                                     \
      select_all_list_then_##SUF(SelArgs a, u64 kth, int bits, u64* out, u64 k, RowRun* run,       \
                                 u64* comps, u32* bins, u64* edge, SelArgs dense) {                \
    dependent_launch_entry();                                                                      \
    select_all_then_dense<T>(a, kth, bits, out, k, run, comps, bins, edge, dense);                 \
  }

SELECT_ALL_THEN_DENSE(f32, float)
SELECT_ALL_THEN_DENSE(f16, __half)
SELECT_ALL_THEN_DENSE(bf16, __nv_bfloat16)

SAMPLE_KTH(f32, float)
SAMPLE_KTH(f16, __half)
SAMPLE_KTH(bf16, __nv_bfloat16)

SEL_KERNELS(f32, float, false)
SEL_KERNELS(f16, __half, false)
SEL_KERNELS(bf16, __nv_bfloat16, false)
SEL_KERNELS(list, float, true)
