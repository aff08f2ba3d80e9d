// The sorted top-k of few rows straight from the lists that hold it, in one launch: a filter's
// buffer (k <= R <= M elements at or above the row's threshold) or the fallback's k composites. It
// replaces the buffer's radix selection (a grid barrier per digit) and the ranking of its k
// outputs.
//
// The first digit below the bits that a buffer's threshold key and its largest kept key share is
// counted over the list, spread over the grid; after a grid barrier every block holds each bin's
// count and the count above it. The elements of the bins down to the one holding the k-th largest
// go, bin by bin, to a bucket array (a counting sort's scatter), and after a second barrier one
// block per slice [lo, hi) of output places reads the bins that hold those places: at most RL_CAP
// composites (else it narrows them further, a digit per read, see sort_slice) gathered into shared
// memory, each one's place is how many composites lie above them plus how many gathered ones are
// larger.
// Composites are distinct, so every place in [lo, hi) is written once. One row with a short list
// takes a plain launch instead (rank_whole): each block finds its places' bins in the filter's
// histogram and gathers them from the whole list itself.
#pragma once
#include <cooperative_groups.h>
#include <cub/block/block_scan.cuh>
#include "common.cuh"

#define RL_THREADS 1024
#define RL_DIGIT 11
#define RL_BINS (1 << RL_DIGIT)
#define RL_CAP 1024
// Most gathered composites ranked by counting; more are sorted (bitonic, RL_CAP = RL_THREADS).
#define RL_RANKED 256
// List elements a thread loads before it uses any (the reads come from L2).
#define RL_BATCH 8

// The bits of c from s up (none from 64 up).
__device__ __forceinline__ u64 bits_from(u64 c, int s) { return s >= 64 ? 0 : c >> s; }

// The composites whose bits from `shift` up equal `prefix`; `above` counts the list's larger ones.
struct Cell {
  u64 prefix;
  int shift;
  u64 above;
};

// One row's list: a buffer's keys and indices, composites (keys null), or, for a row that fell back
// where no fallback launch ran, the input row itself (`dense`: keys of its elements by `mag`, each
// element's index its place).
struct ListRow {
  const u32* keys;
  const u64* idx;
  const u64* comps;
  u64 len;
  const void* dense = nullptr;
  int mag = 0;
};

// Whether a composite in [c0, c1] may lie in the cell (it does when c0 == c1 or the cell's shift is
// at least the index bits: a key alone then places it).
__device__ __forceinline__ bool may_hold(const Cell& x, u64 c0, u64 c1) {
  return bits_from(c0, x.shift) <= x.prefix && bits_from(c1, x.shift) >= x.prefix;
}

// Calls f(j, valid, raw) for every element of the list, RL_BATCH loads a thread in flight before
// any is used; every thread runs the same rounds (f may use warp votes). raw: the key, or the
// composite.
template <typename T, typename F>
__device__ __forceinline__ void each_element(const ListRow& l, F f) {
  const T* const dense = (const T*)l.dense;
  for (u64 base = 0; base < l.len; base += (u64)RL_THREADS * RL_BATCH) {
    u64 v[RL_BATCH];
#pragma unroll
    for (int b = 0; b < RL_BATCH; ++b) {
      const u64 j = base + (u64)b * RL_THREADS + threadIdx.x;
      v[b] = j >= l.len ? 0
             : l.keys   ? (u64)__ldcg(l.keys + j)
             : l.comps  ? __ldcg(l.comps + j)
                        : (u64)Ops<T>::key(dense[j], l.mag);
    }
#pragma unroll
    for (int b = 0; b < RL_BATCH; ++b) {
      const u64 j = base + (u64)b * RL_THREADS + threadIdx.x;
      f(j, j < l.len, v[b]);
    }
  }
}

// The cell's sub-cell (its next d bits, histogram h) that holds the composite of rank `rank`;
// `count` receives how many composites it holds. Every thread of the block calls it and gets the
// same cell.
__device__ Cell narrow_cell(const u32* h, int d, const Cell& x, u64 rank, u64& count) {
  typedef cub::BlockScan<u32, RL_THREADS, cub::BLOCK_SCAN_WARP_SCANS> Scan;
  __shared__ typename Scan::TempStorage tmp;
  __shared__ u32 s_digit, s_before, s_count;
  const u32 bins = 1u << d, t = threadIdx.x;
  // Thread t holds the digits bins-1-2t and bins-2-2t: a scan in descending digit order.
  const u32 d0 = bins - 1 - 2 * t, d1 = d0 - 1;
  const u32 v0 = 2 * t < bins ? h[d0] : 0, v1 = 2 * t + 1 < bins ? h[d1] : 0;
  u32 before;
  Scan(tmp).ExclusiveSum(v0 + v1, before);
  const u64 pos = rank - x.above;
  if (2 * t < bins && before <= pos && pos < before + v0) {
    s_digit = d0;
    s_before = before;
    s_count = v0;
  } else if (2 * t + 1 < bins && before + v0 <= pos && pos < before + v0 + v1) {
    s_digit = d1;
    s_before = before + v0;
    s_count = v1;
  }
  __syncthreads();
  count = s_count;
  const Cell next = {x.prefix << d | s_digit, x.shift - d, x.above + s_before};
  __syncthreads();
  return next;
}

// The composites a block ranks for its slice of output places.
__device__ __forceinline__ u64* slice_slots() {
  __shared__ u64 slots[RL_CAP];
  return slots;
}

// Places [lo, hi) of a row from the `count` composites in the slice's slots, the row's places
// above + [0, count) in some order: each one's place is `above` plus how many of them are larger.
template <typename T>
__device__ void place_slice(u32 count, u64 above, u64 n, int ib, u64 lo, u64 hi, const T* row,
                            T* vals, long long* out) {
  u64* const gathered = slice_slots();
  const u32 t = threadIdx.x;
  const u64 imask = (1ull << ib) - 1;
  // Writes the composite of local rank p (its place above + p) where the slice holds it.
  auto place_at = [&](u64 c, u64 p) {
    const u64 place = above + p;
    if (place < lo || place >= hi) return;
    // Clamped: a composite decodes to an index of the row whatever the list holds.
    const u64 low = c & imask, idx = low < n ? n - 1 - low : n - 1;
    vals[place] = row[idx];
    out[place] = (long long)idx;
  };
  if (count > RL_RANKED) {
    // Many: a bitonic sort, descending (padding with zeros, which sort last; a zero composite
    // of the list is the same composite, so where it lands does not matter).
    if (t >= count) gathered[t] = 0;
    __syncthreads();
    for (u32 size = 2; size <= RL_CAP; size <<= 1) {
      for (u32 stride = size >> 1; stride; stride >>= 1) {
        const u32 j = t ^ stride;
        if (j > t) {
          const u64 x = gathered[t], y = gathered[j];
          if ((x < y) == ((t & size) == 0)) {
            gathered[t] = y;
            gathered[j] = x;
          }
        }
        __syncthreads();
      }
    }
    if (t < count) place_at(gathered[t], t);
    __syncthreads();
    return;
  }
  // Few: each one's place by counting, PARTS lanes of a warp over their shares of the larger ones.
  u32 parts = 32;
  while (parts > 1 && count * parts > RL_THREADS) parts >>= 1;
  const u32 rounds = (count * parts + RL_THREADS - 1) / RL_THREADS;
  for (u32 q = 0; q < rounds; ++q) {
    const u32 w = q * RL_THREADS + t, e = w / parts, part = w % parts;
    const bool valid = e < count;
    const u64 c = valid ? gathered[e] : 0;
    u32 larger = 0;
    if (valid)
      for (u32 i = part; i < count; i += parts) larger += gathered[i] > c;
    for (u32 o = 1; o < parts; o <<= 1) larger += __shfl_xor_sync(0xffffffffu, larger, o);
    if (valid && part == 0) place_at(c, larger);
  }
  __syncthreads();
}

// Output places [lo, hi) of a row from the list `l` that holds them: its composites share their
// bits from `shift` up (`prefix`) and `above` composites of the row are larger than all of them.
// Every block of the grid reads the whole list, so it is short (a few bins) unless the keys pile up
// in one.
// Values are gathered from the row `row` of n elements.
template <typename T>
__device__ void sort_slice(const ListRow& l, u64 prefix, int shift, u64 above, u64 n, int ib,
                           u64 lo, u64 hi, const T* row, T* vals, long long* out) {
  __shared__ u32 h_top[RL_BINS], h_bot[RL_BINS];
  __shared__ u32 fill;
  u64* const gathered = slice_slots();
  const u32 t = threadIdx.x;
  const u64 imask = (1ull << ib) - 1;
  // A buffer's or the input's element's composite lies in [key << ib, key << ib | imask] until its
  // index is read (the input's is its place).
  auto bounds = [&](u64 raw, u64& c0, u64& c1) {
    c0 = l.comps ? raw : raw << ib;
    c1 = l.comps ? raw : c0 | imask;
  };
  auto exact = [&](u64 j, u64 c0) { return l.comps ? c0 : c0 | (n - 1 - (l.keys ? l.idx[j] : j)); };
  Cell top = {prefix, shift, above}, bot = top;
  u64 between = l.len;
  // Cells of shift 0 are single composites: then between is hi - lo, unless the list was not
  // distinct.
  while (between > RL_CAP && (top.shift > 0 || bot.shift > 0)) {
    const bool one = top.prefix == bot.prefix && top.shift == bot.shift;
    const int dt = min(RL_DIGIT, top.shift), db = min(RL_DIGIT, bot.shift);
    for (u32 i = t; i < RL_BINS; i += RL_THREADS) h_top[i] = h_bot[i] = 0;
    __syncthreads();
    each_element<T>(l, [&](u64 j, bool valid, u64 raw) {
      u64 c0, c1;
      bounds(raw, c0, c1);
      const bool mt = valid && may_hold(top, c0, c1), mb = valid && !one && may_hold(bot, c0, c1);
      // The index is read where a digit or a cell's bits reach into it.
      const bool need = (mt && top.shift - dt < ib) || (mb && bot.shift - db < ib);
      const u64 c = need ? exact(j, c0) : c0;
      const bool in_top = mt && bits_from(c, top.shift) == top.prefix;
      const bool in_bot = mb && bits_from(c, bot.shift) == bot.prefix;
      count_bin(h_top, in_top ? (u32)(c >> (top.shift - dt)) & ((1u << dt) - 1) : ~0u);
      if (!one) count_bin(h_bot, in_bot ? (u32)(c >> (bot.shift - db)) & ((1u << db) - 1) : ~0u);
    });
    __syncthreads();
    u64 top_count, bot_count;
    const Cell next_top = narrow_cell(h_top, dt, top, lo, top_count);
    bot = narrow_cell(one ? h_top : h_bot, db, bot, hi - 1, bot_count);
    top = next_top;
    between = bot.above + bot_count - top.above;
  }
  if (t == 0) fill = 0;
  __syncthreads();
  each_element<T>(l, [&](u64 j, bool valid, u64 raw) {
    u64 c0, c1;
    bounds(raw, c0, c1);
    if (!valid || bits_from(c1, bot.shift) < bot.prefix || bits_from(c0, top.shift) > top.prefix)
      return;
    const u64 c = exact(j, c0);
    if (bits_from(c, bot.shift) < bot.prefix || bits_from(c, top.shift) > top.prefix) return;
    const u32 slot = atomicAdd(&fill, 1u);
    if (slot < RL_CAP) gathered[slot] = c;
  });
  __syncthreads();
  place_slice<T>(min(fill, (u32)RL_CAP), top.above, n, ib, lo, hi, row, vals, out);
}

struct RankListArgs {
  const void* x;
  u64 n, k, rows, slice;
  int ib, tb;
  const u32* keys;  // the buffer: keys and indices, cap a row
  const u64* idx;
  u64 cap;
  const RowRun* run;
  const RowSel* sel;
  const u64* comps;  // the fallback's composites, k a row
  u32* counts;       // zeroed: rows x RL_BINS bin counts, then as many bin cursors
  u64* bucket;       // rows x max(cap, k) composites by bin
  void* vals;
  long long* out;
  const u32* bins;  // one row: the filter's histogram of its kept keys (filter_bin), or null
  int mag;          // keys by magnitude (a fallen-back row's keys are read from the input)
  int pad;
};
static_assert(sizeof(RankListArgs) == 144,
              "RankListArgs: the size its Rust mirror (src/cuda/abi.rs) asserts");

// Row r's list, and the bits its composites share: from `shift` up, equal to `prefix`. A buffer's
// keys lie between its threshold's key and its largest kept key; the fallback's composites, and a
// fallen-back row's input where no fallback launch wrote them (comps null), are known only to fit
// tb bits.
template <typename T>
__device__ ListRow row_list(const RankListArgs& a, u64 r, u64& prefix, int& shift) {
  prefix = 0;
  shift = a.tb;
  if (a.run[r].status != ROW_OK) {
    if (a.comps) return {nullptr, nullptr, a.comps + r * a.k, a.k};
    return {nullptr, nullptr, nullptr, a.n, (const T*)a.x + r * a.n, a.mag};
  }
  const u64 counter = a.run[r].counter;
  const u32 lo_key = (u32)(a.sel[r].tmin >> a.ib), hi_key = a.run[r].max_key;
  if (hi_key >= lo_key) {
    const int d = hi_key == lo_key ? -1 : 31 - __clz(lo_key ^ hi_key);
    shift = d + 1 + a.ib;
    prefix = d >= 31 ? 0 : lo_key >> (d + 1);
  }
  return {a.keys + r * a.cap, a.idx + r * a.cap, nullptr, counter < a.cap ? counter : a.cap};
}

// Row r's bins in descending order: each bin's count and how many lie in the bins above it, into
// shared memory, and the bin holding the k-th largest. Every thread of the block calls it.
__device__ u32 row_bins(const RankListArgs& a, u64 r, u32* count, u32* above) {
  typedef cub::BlockScan<u32, RL_THREADS, cub::BLOCK_SCAN_WARP_SCANS> Scan;
  __shared__ typename Scan::TempStorage tmp;
  __shared__ u32 s_cut;
  const u32 t = threadIdx.x, d0 = RL_BINS - 1 - 2 * t, d1 = d0 - 1;
  const u32* h = a.counts + r * RL_BINS;
  const u32 v0 = __ldcg(h + d0), v1 = __ldcg(h + d1);
  u32 before;
  Scan(tmp).ExclusiveSum(v0 + v1, before);
  count[d0] = v0;
  count[d1] = v1;
  above[d0] = before;
  above[d1] = before + v0;
  if (t == 0) s_cut = 0;
  __syncthreads();
  const u64 kth = a.k - 1;
  if (before <= kth && kth < before + v0) s_cut = d0;
  if (before + v0 <= kth && kth < before + v0 + v1) s_cut = d1;
  __syncthreads();
  return s_cut;
}

// The digit of the row's first bins: the RL_DIGIT bits (fewer when fewer are left) below `shift`.
__device__ __forceinline__ int first_digit(int shift) { return min(RL_DIGIT, shift); }

// Calls f(r, j, l, d, low) for this block's chunks of RL_THREADS elements of the rows' lists: row
// r, this thread's element j (past the list in its last chunk), the list l and its first digit (d
// bits at `low`). Every thread of the block calls it.
template <typename T, typename F>
__device__ __forceinline__ void each_chunk(const RankListArgs& a, u64 chunks, F f) {
  for (u64 item = blockIdx.x; item < a.rows * chunks; item += gridDim.x) {
    const u64 r = item / chunks, j = (item % chunks) * RL_THREADS + threadIdx.x;
    u64 prefix;
    int shift;
    const ListRow l = row_list<T>(a, r, prefix, shift);
    if ((item % chunks) * RL_THREADS >= l.len) continue;
    const int d = first_digit(shift);
    f(r, j, l, d, shift - d);
  }
}

// The keys [klo, khi] of the filter's bins that hold output places [lo, hi) of a passed row, from
// its histogram `h` (FILTER_BINS counts by filter_bin above the threshold's key tk): `above`
// receives how many kept keys lie in the bins above them; returns how many the bins hold (~0 where
// the histogram does not reach hi). Every thread of the block calls it.
__device__ u64 slice_bins(const u32* h, u32 tk, u64 lo, u64 hi, u32& klo, u32& khi, u64& above) {
  typedef cub::BlockScan<u32, RL_THREADS> Scan;
  constexpr int PER = (FILTER_BINS + RL_THREADS - 1) / RL_THREADS;
  __shared__ typename Scan::TempStorage scan;
  __shared__ u32 s_top, s_bot;
  __shared__ u64 s_above, s_end;
  const int t = threadIdx.x;
  if (t == 0) s_above = s_end = ~0ull;
  u32 own[PER];
  const u32 sum = bins_from_top(h, own);
  u32 incl;
  Scan(scan).InclusiveSum(sum, incl);
  u64 at = incl - sum;
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const u32 b = (u32)(FILTER_BINS - 1 - (t * PER + i));
    if (own[i] && at <= lo && lo < at + own[i]) {
      s_top = b;
      s_above = at;
    }
    if (own[i] && at <= hi - 1 && hi - 1 < at + own[i]) {
      s_bot = b;
      s_end = at + own[i];
    }
    at += own[i];
  }
  __syncthreads();
  const u64 from = s_above, to = s_end;
  u64 dlo, dhi, unused;
  filter_bin_range(s_bot, dlo, unused);
  filter_bin_range(s_top, unused, dhi);
  __syncthreads();
  if (from == ~0ull || to == ~0ull) return ~0ull;
  klo = (u32)min((u64)tk + dlo, 0xffffffffull);
  khi = (u32)min((u64)tk + dhi, 0xffffffffull);
  above = from;
  return to - from;
}

// Keys a thread of gather_keys loads at once, four to a load.
#define GATHER_QUADS 4

// The composites of a buffer's list whose keys lie in [klo, khi] (at most RL_CAP of them), into the
// slice's slots: four keys a load and every load of a round in flight before any is tested, as the
// test is a compare and the taken ones are few. Returns how many. Every thread of the block calls
// it.
__device__ u32 gather_keys(const ListRow& l, u32 klo, u32 khi, u64 n, int ib) {
  __shared__ u32 fill;
  u64* const slots = slice_slots();
  const u32 t = threadIdx.x;
  if (t == 0) fill = 0;
  __syncthreads();
  auto take = [&](u64 j, u32 key) {
    if (key < klo || key > khi) return;
    const u32 slot = atomicAdd(&fill, 1u);
    if (slot < RL_CAP) slots[slot] = (u64)key << ib | (n - 1 - l.idx[j]);
  };
  // A list that starts off 16-byte alignment is read a key at a time.
  const u64 quads = ((unsigned long long)l.keys & 15) ? 0 : l.len / 4;
  const uint4* q = (const uint4*)l.keys;
  for (u64 base = 0; base < quads; base += (u64)RL_THREADS * GATHER_QUADS) {
    uint4 v[GATHER_QUADS];
#pragma unroll
    for (int b = 0; b < GATHER_QUADS; ++b) {
      const u64 i = base + (u64)b * RL_THREADS + t;
      v[b] = i < quads ? __ldcg(q + i) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int b = 0; b < GATHER_QUADS; ++b) {
      const u64 i = base + (u64)b * RL_THREADS + t;
      if (i >= quads) continue;
      take(4 * i, v[b].x);
      take(4 * i + 1, v[b].y);
      take(4 * i + 2, v[b].z);
      take(4 * i + 3, v[b].w);
    }
  }
  for (u64 j = quads * 4 + t; j < l.len; j += RL_THREADS) take(j, __ldcg(l.keys + j));
  __syncthreads();
  return min(fill, (u32)RL_CAP);
}

// Short lists: each block reads its row's whole list for its slice of output places, so there is no
// count over the grid, no scatter into the bucket and no grid barrier: a plain launch. A passed row
// with the filter's histogram gathers its slice's bins in one read of its keys; otherwise (a bin
// crowded past RL_CAP, a fallen-back row's composites) sort_slice narrows from the bits the whole
// list shares, a read of it a digit. Where no fallback launch ran (comps null), a fallen-back row's
// list is its input: each block narrows its slice over the whole row, a few reads of it. That costs
// milliseconds, and the plan makes it rare enough to cost less than the launch it saves.
template <typename T>
__device__ void rank_whole(const RankListArgs& a) {
  const u64 parts = (a.k + a.slice - 1) / a.slice;
  for (u64 item = blockIdx.x; item < a.rows * parts; item += gridDim.x) {
    const u64 r = item / parts, lo = (item % parts) * a.slice, hi = min(lo + a.slice, a.k);
    const T* row = (const T*)a.x + r * a.n;
    T* vals = (T*)a.vals + r * a.k;
    long long* out = a.out + r * a.k;
    u64 prefix;
    int shift;
    const ListRow l = row_list<T>(a, r, prefix, shift);
    if (a.bins && l.keys) {
      u32 klo, khi;
      u64 above;
      const u32 tk = (u32)(a.sel[r].tmin >> a.ib);
      if (slice_bins(a.bins + r * FILTER_BINS, tk, lo, hi, klo, khi, above) <= RL_CAP) {
        const u32 count = gather_keys(l, klo, khi, a.n, a.ib);
        place_slice<T>(count, above, a.n, a.ib, lo, hi, row, vals, out);
        continue;
      }
    }
    sort_slice<T>(l, prefix, shift, 0, a.n, a.ib, lo, hi, row, vals, out);
  }
}

// The fallen-back rows' composites come from the fallback launch here: comps is never null.
template <typename T>
__device__ void rank_lists(const RankListArgs& a) {
  namespace cg = cooperative_groups;
  cg::grid_group grid = cg::this_grid();
  // count: the first digit's histogram of one chunk, then a row's bin counts (row_bins).
  __shared__ u32 count[RL_BINS], above[RL_BINS];
  u32* h = count;
  const u32 t = threadIdx.x;
  const u64 bcap = a.cap > a.k ? a.cap : a.k, chunks = (bcap + RL_THREADS - 1) / RL_THREADS;
  // Each row's first digit counted over the grid, a chunk of RL_THREADS elements an item; a block
  // adds its counts of a row to the row's once.
  u64 counted = ~0ull;
  auto flush = [&]() {
    __syncthreads();
    if (counted != ~0ull)
      for (u32 i = t; i < RL_BINS; i += RL_THREADS)
        if (h[i]) atomicAdd(a.counts + counted * RL_BINS + i, h[i]);
    for (u32 i = t; i < RL_BINS; i += RL_THREADS) h[i] = 0;
    __syncthreads();
  };
  each_chunk<T>(a, chunks, [&](u64 r, u64 j, const ListRow& l, int d, int low) {
    if (counted != r) {
      flush();
      counted = r;
    }
    u32 bin = ~0u;
    if (j < l.len) {
      const u64 c =
          l.keys ? ((u64)l.keys[j] << a.ib) | (low < a.ib ? a.n - 1 - l.idx[j] : 0) : l.comps[j];
      bin = (u32)(c >> low) & ((1u << d) - 1);
    }
    count_bin(h, bin);
  });
  flush();
  grid.sync();
  // The bins down to the cut, scattered by bin into the bucket array.
  u64 bins_of = ~0ull;
  u32 cut = 0;
  each_chunk<T>(a, chunks, [&](u64 r, u64 j, const ListRow& l, int d, int low) {
    if (bins_of != r) {
      __syncthreads();
      cut = row_bins(a, r, count, above);
      bins_of = r;
    }
    u32 bin = ~0u;
    u64 c = 0;
    if (j < l.len) {
      const u32 key = l.keys ? l.keys[j] : 0;
      const u64 c0 = l.keys ? (u64)key << a.ib : l.comps[j];
      const u32 b0 = (u32)(c0 >> low) & ((1u << d) - 1);
      // Only a kept element's index is read, unless the digit reaches into the index bits.
      if (low < a.ib || b0 >= cut) {
        c = l.keys ? c0 | (a.n - 1 - l.idx[j]) : c0;
        bin = (u32)(c >> low) & ((1u << d) - 1);
        if (bin < cut) bin = ~0u;
      }
    }
    const unsigned same = __match_any_sync(0xffffffffu, bin);
    const int lane = t & 31, leader = __ffs(same) - 1;
    u32 base = 0;
    if (bin != ~0u && lane == leader)
      base = atomicAdd(a.counts + (a.rows + r) * RL_BINS + bin, (u32)__popc(same));
    base = __shfl_sync(same, base, leader);
    if (bin != ~0u) a.bucket[r * bcap + above[bin] + base + __popc(same & ((1u << lane) - 1))] = c;
  });
  grid.sync();
  // One block per slice of output places, from the bins that hold them.
  const u64 parts = (a.k + a.slice - 1) / a.slice;
  __shared__ u32 s_top, s_bot;
  for (u64 item = blockIdx.x; item < a.rows * parts; item += gridDim.x) {
    const u64 r = item / parts, lo = (item % parts) * a.slice, hi = min(lo + a.slice, a.k);
    u64 prefix;
    int shift;
    row_list<T>(a, r, prefix, shift);
    if (bins_of != r) {
      __syncthreads();
      row_bins(a, r, count, above);
      bins_of = r;
    }
    for (u32 i = t; i < RL_BINS; i += RL_THREADS) {
      if (above[i] <= lo && lo < above[i] + count[i]) s_top = i;
      if (above[i] <= hi - 1 && hi - 1 < above[i] + count[i]) s_bot = i;
    }
    __syncthreads();
    const u32 top = s_top, bot = s_bot;
    const int d = first_digit(shift);
    const u64 from = above[top], to = above[bot] + count[bot];
    const ListRow seg = {nullptr, nullptr, a.bucket + r * bcap + from, to - from};
    // One bin: its elements share the digit too.
    if (top == bot) {
      prefix = prefix << d | top;
      shift -= d;
    }
    sort_slice<T>(seg, prefix, shift, from, a.n, a.ib, lo, hi, (const T*)a.x + r * a.n,
                  (T*)a.vals + r * a.k, a.out + r * a.k);
  }
}
