// Row-wise exact top-k by a histogram of the keys and a second read (src/cuda/rows.rs says which
// shapes come here).
//
// Pass 1 streams the row once (16-byte loads) into a histogram of the top 12 bits of every
// element's key. The bin holding the k-th largest key gives the threshold bin: every element of a
// higher bin is selected, and the k - above largest of the bin remain to be found. Pass 2 re-reads
// the row, last part first (what pass 1 read last is the likeliest still in L2), writes the indices
// of the higher bins straight out and keeps the bin's elements as (key, index) composites; an exact
// selection over them gives the cut. A bin larger than the buffer (an exact count, so the result is
// always exact) is selected from the row itself by a row's own block, and marks a split row for the
// dense fallback.
// Ties resolve by the composite: equal keys rank by lower index.
//
// A block that has finished a row carries a guess, a key, to its next row (rows of one call are
// alike:
// attention scores, activations). Its pass 1 counts only the elements at or above the guess (the
// rest of the row costs no atomic) and keeps them in shared memory; their exact count checks the
// guess (at least k, so the k-th largest is among them, and no more than the buffer). A row that
// passes is selected from what pass 1 kept and is read once. A guess that kept too many still
// counted every element from it up, so the cut is known and one more read compacts the row; a guess
// that kept too few is lowered and a second read adds the elements between the two; past that the
// row is read into the full histogram and goes on as above. The result is exact either way and only
// the cost depends on the guess. The guess is the key at a rank a margin above k, interpolated
// inside a histogram bin; a block's first row takes it from a sample of the row. Rows after the
// first go to the blocks from the call's counter, so that a block slowed by a missed guess takes
// fewer.
//
// Two forms: one block per row (rows_topk: the histogram and the bin's elements in shared memory,
// one launch, output written by the same block when k <= FUSED_MAX_K (index order from a bitmap of
// the row, value order by per-warp ranks and a merge), a bin over its buffer selected by the block
// from the row), and rows split over many blocks (rows_split_hist, then rows_split_compact: a
// histogram and a candidate buffer per row in global memory; the last block to finish a row's part
// of a pass takes the row's next step: block_any_last), for rows too few to fill the device.
#include <cub/block/block_scan.cuh>
#include "block_select.cuh"

#define ROWS_THREADS 256
// Blocks resident on an SM (64 registers a thread): while one block scans its histogram or selects
// from its buffer, the others keep the SM's loads in flight.
#define ROWS_BLOCKS_PER_SM 4
#define ROWS_BITS 12
#define ROWS_BINS (1 << ROWS_BITS)
// The threshold bin's elements a block keeps in shared memory, and a split row in global memory.
#define ROWS_CAP 4096
#define SPLIT_CAP 16384
// Elements at or above a carried threshold bin that pass 1 keeps beside the histogram, a slice a
// warp (a guess aims to keep at most 3/4 of it: the next row may hold more, and a warp more than
// its share).
#define CARRY_CAP 2048
#define WARP_KEPT (CARRY_CAP / (ROWS_THREADS / 32))
// No guess: no key of any element type (f32 guesses stay below the NaN key, 0xffffffff).
#define NO_GUESS 0xffffffffu
// Largest k whose sorted values and indices the row's block writes itself.
#define FUSED_MAX_K 1024
// Largest k whose slots such a block keeps in shared memory (48 KiB of static shared memory a
// block).
#define SMEM_SLOTS 512
// 16-byte loads each thread keeps in flight per round of a pass.
#define ROWS_UNROLL 4
// Kept elements of a round a lane loads again at once.
#define KEPT_BATCH 4
// The top bin holds exactly the NaNs (every NaN has the largest key, +inf's bin is lower).
#define NAN_BIN (ROWS_BINS - 1)

static_assert(ROWS_BINS * 4 + CARRY_CAP * 8 <= ROWS_CAP * 8,
              "pass 1's histogram and kept elements share pass 2's buffer");
static_assert(ROWS_BINS * 4 >= CARRY_CAP * 8,
              "the threshold bin's kept elements fit where the histogram was");
static_assert(FUSED_MAX_K * 3 <= ROWS_CAP, "the output is sorted and placed in pass 2's buffer");
static_assert(ROWS_UNROLL * 8 <= 32, "a lane's kept elements of a round fit one 32-bit mask");
static_assert(FUSED_MAX_K % ROWS_THREADS == 0,
              "sort_desc holds FUSED_MAX_K / ROWS_THREADS keys a lane");

// A row's threshold bin and the elements above it and in it.
struct Cut {
  u32 bin, above, count;
};

// Per-row state of a split row (mirrored in src/cuda/rows.rs: SPLIT_ROW_WORDS u32 words, zeroed).
struct SplitRow {
  u32 hist[ROWS_BINS];
  u32 arrived_hist, arrived_compact;
  u32 bin, above, count;
  u32 out_fill, cand_fill, pad;
};

// How a pass cuts p[0..len) (len < 2^32): an unaligned head, `nvec` 16-byte vectors from p + head,
// and a tail; the head and the tail (`scalars` elements, fewer than a block's threads) take one
// scalar round, thread t taking element scalar(t).
template <typename T>
struct RowCut {
  u32 head, nvec, tail, scalars;
  __device__ __forceinline__ RowCut(const T* p, u64 len) {
    head = (u32)min((u64)(((16 - ((u64)p & 15)) & 15) / sizeof(T)), len);
    nvec = (u32)((len - head) / Ops<T>::VEC);
    tail = head + nvec * Ops<T>::VEC;
    scalars = head + ((u32)len - tail);
  }
  __device__ __forceinline__ u32 scalar(u32 t) const { return t < head ? t : tail + (t - head); }
};

// Calls f(j, raw bits, valid) for every element of p[0..len) (len < 2^32), every thread of the
// block the same number of times (valid = false for padding), so that f may use warp-wide votes.
// The unaligned head and the tail take one scalar round; the body goes in 16-byte vectors, in
// rounds from the last when REV. A warp covers one chunk of each round: it skips chunk (round,
// warp) when enter(chunk) is false and calls left(chunk) after it.
template <bool REV, typename T, typename F, typename Enter, typename Left>
__device__ __forceinline__ void visit_row(const T* p, u64 len, F&& f, Enter&& enter, Left&& left) {
  typedef typename Ops<T>::Vec Vec;
  const u32 V = Ops<T>::VEC;
  const u32 t = threadIdx.x, warps = ROWS_THREADS / 32;
  const RowCut<T> cut(p, len);
  const u32 head = cut.head, nvec = cut.nvec;
  {
    const bool valid = t < cut.scalars;
    const u32 j = cut.scalar(t);
    f(j, valid ? Ops<T>::raw1(p[j]) : 0u, valid);
  }
  const Vec* vp = (const Vec*)(p + head);
  const u32 per_round = ROWS_UNROLL * ROWS_THREADS;
  const u32 rounds = (nvec + per_round - 1) / per_round;
  for (u32 i = 0; i < rounds; ++i) {
    const u32 round = REV ? rounds - 1 - i : i;
    const u32 chunk = round * warps + t / 32;
    if (!enter(chunk)) continue;
    const u32 b = round * per_round;
    Vec w[ROWS_UNROLL];
#pragma unroll
    for (int u = 0; u < ROWS_UNROLL; ++u) {
      const u32 v = b + u * ROWS_THREADS + t;
      if (v < nvec) w[u] = vp[v];
    }
#pragma unroll
    for (int u = 0; u < ROWS_UNROLL; ++u) {
      const u32 v = b + u * ROWS_THREADS + t;
      const bool valid = v < nvec;
#pragma unroll
      for (int q = 0; q < (int)V; ++q)
        f(head + v * V + q, valid ? Ops<T>::raw(w[u], q) : 0u, valid);
    }
    left(chunk);
  }
}

template <bool REV, typename T, typename F>
__device__ __forceinline__ void visit_row(const T* p, u64 len, F&& f) {
  visit_row<REV>(p, len, f, [](u32) { return true; }, [](u32) {});
}

// Chunks of a row whose largest bin pass 1 records, so that pass 2 skips the chunks below the
// threshold bin (a masked tail, a quiet stretch): rows of up to 32 rounds.
#define ROWS_CHUNKS (32 * ROWS_THREADS / 32)

// A slot in an array (shared or global) for every lane with `take`, one atomic per warp.
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

// The bin a row is likeliest to fill with one value (a -inf mask, zeros by magnitude): its elements
// are counted in registers instead of by conflicting atomics.
template <typename T>
__device__ __forceinline__ u32 common_bin(int mag) {
  return (mag ? 0u : Ops<T>::key_bits(Ops<T>::NEG_INF, 0)) >> (Ops<T>::KB - ROWS_BITS);
}

// The largest bin a warp saw in a chunk (its `top`, reset), when chunk_max records them.
__device__ __forceinline__ void record_chunk(u32* chunk_max, u32 chunk, u32& top) {
  if (chunk_max) {
    const u32 m = __reduce_max_sync(0xffffffffu, top);
    if ((threadIdx.x & 31) == 0 && chunk < ROWS_CHUNKS) chunk_max[chunk] = m;
  }
  top = 0;
}

// Pass 1: the histogram of p[0..len) added into the shared h; with `chunk_max`, the largest bin of
// each chunk (ROWS_CHUNKS of them at most) too.
template <typename T>
__device__ __forceinline__ void hist_pass(const T* p, u64 len, int mag, u32* h, u32* chunk_max) {
  const int SHIFT = Ops<T>::KB - ROWS_BITS;
  const u32 common = common_bin<T>(mag);
  u32 in_common = 0, top = 0;
  visit_row<false>(
      p, len,
      [&](u32, u32 raw, bool valid) {
        const u32 bin = Ops<T>::key_bits(raw, mag) >> SHIFT;
        if (valid) {
          top = max(top, bin);
          if (bin == common)
            ++in_common;
          else
            atomicAdd(&h[bin], 1u);
        }
      },
      [](u32) { return true; },
      [&](u32 chunk) { record_chunk(chunk_max, chunk, top); });
  in_common = __reduce_add_sync(0xffffffffu, in_common);
  if ((threadIdx.x & 31) == 0 && in_common) atomicAdd(&h[common], in_common);
}

// A warp's slots for `cnt` elements a lane: its first slot from the warp's running `fill` (advanced
// for the whole warp), by a prefix sum over the lanes; nothing when no lane has any.
__device__ __forceinline__ bool warp_slots(u32 cnt, u32& fill, u32& slot) {
  if (!__any_sync(0xffffffffu, cnt)) return false;
  const u32 lane = threadIdx.x & 31;
  u32 incl = cnt;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const u32 o = __shfl_up_sync(0xffffffffu, incl, d);
    if (lane >= (u32)d) incl += o;
  }
  slot = fill + incl - cnt;
  fill += __shfl_sync(0xffffffffu, incl, 31);
  return cnt != 0;
}

// Pass 1 with a guess: the histogram of the elements whose key is at least the guess only (the rest
// cost no atomic) and their composites (a row of n) into `kept`, a slice of WARP_KEPT slots a warp
// filled through a count in registers (no shared counter to contend for). Each warp's count goes to
// warp_kept; `kept_total` and `kept_most` end at the exact count and the largest warp's. Most
// elements fail the test, so it costs a compare against the guess bin's lower bound (as
// compact_pass does) and a count; the slots are drawn once a round for all of a lane's elements,
// and keys are computed for the kept ones only. The guess's bin counts only its elements at or
// above the guess.
// With `resume`, the warps' slices go on from warp_kept (a second pass below an earlier guess).
template <typename T, typename Keeps>
__device__ __forceinline__ void guess_pass_by(const T* p, u64 n, int mag, int ib, u32* h, u64* kept,
                                              u32* warp_kept, u32* kept_total, u32* kept_most,
                                              bool resume, Keeps keeps) {
  typedef typename Ops<T>::Vec Vec;
  const u32 V = Ops<T>::VEC;
  const int SHIFT = Ops<T>::KB - ROWS_BITS;
  const u32 t = threadIdx.x, lane = t & 31, warp = t / 32;
  u64* mine = kept + warp * WARP_KEPT;
  const u32 before = resume ? warp_kept[warp] : 0u;
  u32 fill = before, slot = 0;
  auto keep = [&](u32 j, u32 raw) {
    const u32 key = Ops<T>::key_bits(raw, mag);
    atomicAdd(&h[key >> SHIFT], 1u);
    if (slot < WARP_KEPT) mine[slot] = (u64)composite(key, j, n, ib);
    ++slot;
  };
  const RowCut<T> cut(p, n);
  const u32 head = cut.head, nvec = cut.nvec;
  {
    const bool valid = t < cut.scalars;
    const u32 j = cut.scalar(t);
    const u32 raw = valid ? Ops<T>::raw1(p[j]) : 0u;
    if (warp_slots(valid && keeps(raw), fill, slot)) keep(j, raw);
  }
  const Vec* vp = (const Vec*)(p + head);
  const u32 per_round = ROWS_UNROLL * ROWS_THREADS;
  for (u32 b = 0; b < nvec; b += per_round) {
    Vec w[ROWS_UNROLL];
#pragma unroll
    for (int u = 0; u < ROWS_UNROLL; ++u) {
      const u32 v = b + u * ROWS_THREADS + t;
      if (v < nvec) w[u] = vp[v];
    }
    // Bit u * V + q marks element q of vector u kept: one mask a vector, joined after (independent
    // chains).
    u32 bits_u[ROWS_UNROLL];
#pragma unroll
    for (int u = 0; u < ROWS_UNROLL; ++u) {
      const bool valid = b + u * ROWS_THREADS + t < nvec;
      bits_u[u] = 0;
#pragma unroll
      for (int q = 0; q < (int)V; ++q)
        bits_u[u] |= (u32)(valid && keeps(Ops<T>::raw(w[u], q))) << q;
    }
    u32 bits = 0;
#pragma unroll
    for (int u = 0; u < ROWS_UNROLL; ++u) bits |= bits_u[u] << (u * V);
    if (warp_slots(__popc(bits), fill, slot)) {
      // Kept elements are few: only theirs are visited, their bits read again (the round's lines
      // have left L1 by then), KEPT_BATCH at once so that the loads wait together.
      while (bits) {
        u32 js[KEPT_BATCH], raws[KEPT_BATCH];
#pragma unroll
        for (int q = 0; q < KEPT_BATCH; ++q) {
          const u32 e = __ffs(bits) - 1;
          js[q] = bits ? head + (b + e / V * ROWS_THREADS + t) * V + e % V : ~0u;
          bits &= bits - 1;
        }
#pragma unroll
        for (int q = 0; q < KEPT_BATCH; ++q)
          if (js[q] != ~0u) raws[q] = Ops<T>::raw1(p[js[q]]);
#pragma unroll
        for (int q = 0; q < KEPT_BATCH; ++q)
          if (js[q] != ~0u) keep(js[q], raws[q]);
      }
    }
  }
  if (lane == 0) {
    warp_kept[warp] = fill;
    atomicAdd(kept_total, fill - before);
    atomicMax(kept_most, fill);
  }
}

// With `below` (not NO_GUESS), the elements from the guess up to `below` only, added to what a pass
// with the guess `below` kept.
template <typename T>
__device__ __forceinline__ void guess_pass(const T* p, u64 n, int mag, int ib, u32 guess, u32 below,
                                           u32* h, u64* kept, u32* warp_kept, u32* kept_total,
                                           u32* kept_most) {
  // !(x < lo) holds exactly when key(x) >= guess; a bound on a NaN bit pattern (keys of NaN and
  // above +inf), and the rare pass below an earlier guess, take the key test.
  const float lo = key_value<T>(guess, mag);
  if (lo == lo && below == NO_GUESS) {
    guess_pass_by(p, n, mag, ib, h, kept, warp_kept, kept_total, kept_most, false, [&](u32 raw) {
      const float x = Ops<T>::from_bits(raw);
      return !((mag ? fabsf(x) : x) < lo);
    });
  } else {
    // NaN keys are the largest (NO_GUESS): no bound above them unless one is given.
    const u64 end = below == NO_GUESS ? 1ull << 32 : below;
    guess_pass_by(p, n, mag, ib, h, kept, warp_kept, kept_total, kept_most, below != NO_GUESS,
                  [&](u32 raw) {
                    const u32 key = Ops<T>::key_bits(raw, mag);
                    return key >= guess && key < end;
                  });
  }
}

// Zeroes a shared histogram (16-byte aligned) in 16-byte stores.
__device__ __forceinline__ void zero_hist(u32* h) {
  for (u32 i = threadIdx.x; i < ROWS_BINS / 4; i += ROWS_THREADS)
    ((uint4*)h)[i] = make_uint4(0, 0, 0, 0);
}

// The bin of the shared histogram h (16-byte aligned) that holds the k-th largest key, for every
// thread of the block. With `at_second`, the bin holding the second-th largest too (meaningless
// when h counts fewer): both from one scan. Only the thread whose bins hold a crossing walks them.
__device__ __forceinline__ Cut find_cut(const u32* h, u64 k, u64 second = 0,
                                        Cut* at_second = nullptr) {
  typedef cub::BlockScan<u32, ROWS_THREADS> Scan;
  const int PER = ROWS_BINS / ROWS_THREADS;
  static_assert(PER % 4 == 0, "a thread's bins are whole 16-byte vectors");
  __shared__ typename Scan::TempStorage scan;
  __shared__ Cut s_cut, s_second;
  // Thread t owns PER consecutive bins from the top, t * PER + i down from the top bin.
  const u32 t = threadIdx.x;
  const uint4* v = (const uint4*)(h + ROWS_BINS - (t + 1) * PER);
  u32 mine = 0;
#pragma unroll
  for (int i = 0; i < PER / 4; ++i) {
    const uint4 q = v[i];
    mine += q.x + q.y + q.z + q.w;
  }
  u32 before;
  Scan(scan).ExclusiveSum(mine, before);
  // Counts and ranks stay below 2^32 (a row of the row kernel is shorter).
  const u64 end = (u64)before + mine;
  auto crossing = [&](u64 rank, Cut& out) {
    if (!(before < rank && end >= rank)) return;
    u32 acc = before;
    for (u32 i = 0; i < PER; ++i) {
      const u32 b = ROWS_BINS - 1 - (t * PER + i), c = h[b];
      if (acc + (u64)c >= rank) {
        out = Cut{b, acc, c};
        return;
      }
      acc += c;
    }
  };
  crossing(k, s_cut);
  if (at_second) crossing(second, s_second);
  __syncthreads();
  const Cut cut = s_cut;
  if (at_second) *at_second = s_second;
  __syncthreads();
  return cut;
}

// The first NaN of p[0..len) (len < 2^32), for every thread of the block; ~0 when none.
template <typename T>
__device__ u32 first_nan(const T* p, u64 len) {
  __shared__ u32 s_first;
  if (threadIdx.x == 0) s_first = ~0u;
  __syncthreads();
  u32 first = ~0u;
  visit_row<false>(p, len, [&](u32 j, u32 raw, bool valid) {
    if (valid && Ops<T>::nan_bits(raw) && j < first) first = j;
  });
  first = __reduce_min_sync(0xffffffffu, first);
  if ((threadIdx.x & 31) == 0) atomicMin(&s_first, first);
  __syncthreads();
  const u32 r = s_first;
  __syncthreads();
  return r;
}

// Whether a row's selection ends in the threshold bin taken whole (no selection inside it), and
// whether the bin's elements overflow a buffer of `cap`.
__device__ __forceinline__ bool whole_bin(const Cut& c, u64 k) {
  return c.count == (u32)k - c.above;
}
__device__ __forceinline__ bool overflows(const Cut& c, u64 k, u32 cap) {
  return !whole_bin(c, k) && c.count > cap;
}

// Pass 2 over p[0..len) (row indices from `base`, rows of n): the higher bins' slots into o through
// the counter out_fill (their composites with `comps`, else their indices), the threshold bin's
// composites into cand through cand_fill (cap slots). Most warps hold neither and skip the votes;
// with `chunk_max` (from pass 1), chunks below the threshold bin are not read at all. Keys below
// `floor` count nowhere (pass 1 counted from a guess up).
template <typename T>
__device__ __forceinline__ void compact_pass(const T* p, u64 len, u64 base, u64 n, int mag, int ib,
                                             bool comps, const Cut& cut, u64 k, u64* o,
                                             u32* out_fill, u64* cand, u32* cand_fill, u32 cap,
                                             const u32* chunk_max, u32 floor) {
  const int SHIFT = Ops<T>::KB - ROWS_BITS;
  const bool whole = whole_bin(cut, k);
  const u32 take_from = whole ? cut.bin : cut.bin + 1;
  const u32 keep_bin = whole ? ~0u : cut.bin;
  auto enter = [&](u32 chunk) {
    return !chunk_max || chunk >= ROWS_CHUNKS || chunk_max[chunk] >= cut.bin;
  };
  auto left = [](u32) {};
  // The bin's bounds as values: !(x < lo) holds exactly when key(x) >= bin << SHIFT, so one compare
  // per element decides (x by magnitude when `mag`). Bounds that fall on NaN bit patterns (the bins
  // of NaN and above +inf) take the key test instead.
  const float lo = key_value<T>(max(cut.bin << SHIFT, floor), mag);
  const float hi = cut.bin + 1 < ROWS_BINS ? key_value<T>((cut.bin + 1) << SHIFT, mag)
                                           : __int_as_float(0x7fffffff);
  auto emit = [&](u32 j, u32 raw, bool take, bool keep) {
    if (__any_sync(0xffffffffu, take || keep)) {
      const u32 pos = warp_slot(out_fill, take);
      // The key only for a slot that keeps it.
      auto comp = [&] { return (u64)composite(Ops<T>::key_bits(raw, mag), base + j, n, ib); };
      if (take && pos < k) o[pos] = comps ? comp() : base + j;
      const u32 slot = warp_slot(cand_fill, keep);
      if (keep && slot < cap) cand[slot] = comp();
    }
  };
  if (lo == lo && hi == hi) {
    visit_row<true>(
        p, len,
        [&](u32 j, u32 raw, bool valid) {
          float x = Ops<T>::from_bits(raw);
          if (mag) x = fabsf(x);
          const bool above_lo = valid && !(x < lo), below_hi = x < hi;
          emit(j, raw, above_lo && (whole || !below_hi), !whole && above_lo && below_hi);
        },
        enter, left);
  } else {
    visit_row<true>(
        p, len,
        [&](u32 j, u32 raw, bool valid) {
          const u32 key = Ops<T>::key_bits(raw, mag), bin = key >> SHIFT;
          valid = valid && key >= floor;
          emit(j, raw, valid && bin >= take_from, valid && bin == keep_bin);
        },
        enter, left);
  }
}

// The row-local index of an element's composite.
__device__ __forceinline__ u64 index_of_comp(u64 c, u64 n, int ib) {
  const u64 low_bits = ib >= 64 ? ~0ull : ((1ull << ib) - 1);
  return n - 1 - (c & low_bits);
}

// A selected element's slot: its composite with `comps`, else its row-local index.
__device__ __forceinline__ u64 slot_of(u64 c, u64 n, int ib, bool comps) {
  return comps ? c : index_of_comp(c, n, ib);
}

// Shared memory for select_few: a digit's histogram, and the candidates of the digit that holds the
// cut.
struct SubDigit {
  u32 hist[256];
  u64 list[ROWS_THREADS];
  u32 fill, digit, need, whole;
};

static_assert(ROWS_THREADS == 256, "select_few: a digit's 256 bins, one a thread");
static_assert(
    ROWS_THREADS * 8 + sizeof(SubDigit) <= ROWS_BINS * 4,
    "select_few's room lies after a bin of ROWS_THREADS elements, inside the spent histogram");

// The kleft largest of at most one composite a thread (c where `valid`, every one sharing the bits
// from `hi` up; distinct), each passed to take(c): one digit of the next 8 bits below `hi` splits
// them, a warp's scan finds the digit that holds the kleft-th, every higher digit is taken, and
// only that digit's composites are ranked among themselves (a smooth row leaves one to three there,
// where ranking all of them against all cost count^2 steps).
template <typename Take>
__device__ __forceinline__ void select_few(u64 c, bool valid, int hi, u32 kleft, SubDigit& s,
                                           Take take) {
  const u32 t = threadIdx.x, lane = t & 31;
  const int lo = hi > 8 ? hi - 8 : 0;
  const u32 mask = (1u << (hi - lo)) - 1;
  s.hist[t] = 0;
  if (t == 0) s.fill = 0;
  __syncthreads();
  const u32 d = valid ? (u32)(c >> lo) & mask : ~0u;
  count_bin(s.hist, d);
  __syncthreads();
  if (t < 32) {
    // Lane l holds digits 255 - 8l down to 248 - 8l.
    u32 h[8], mine = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) mine += h[i] = s.hist[255 - 8 * lane - i];
    u32 incl = mine;
#pragma unroll
    for (int dd = 1; dd < 32; dd <<= 1) {
      const u32 o = __shfl_up_sync(0xffffffffu, incl, dd);
      if (lane >= (u32)dd) incl += o;
    }
    u32 acc = incl - mine;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      if (acc < kleft && acc + h[i] >= kleft) {
        s.digit = 255 - 8 * lane - i;
        s.need = kleft - acc;
        s.whole = acc + h[i] == kleft;
      }
      acc += h[i];
    }
  }
  __syncthreads();
  const u32 cut = s.digit, need = s.need;
  const bool whole = s.whole;
  if (valid && (d > cut || (d == cut && whole))) take(c);
  if (valid && d == cut && !whole) s.list[atomicAdd(&s.fill, 1u)] = c;
  __syncthreads();
  const u32 m = s.fill;
  if (t < m) {
    const u64 own = s.list[t];
    u32 rank = 0;
    for (u32 i = 0; i < m; ++i) rank += s.list[i] > own;
    if (rank < need) take(own);
  }
}

// The rest of a row's output: the k - above largest of the threshold bin's `count` composites
// (read by ld(i)) into o through out_fill.
template <int KB, typename Ld>
__device__ __forceinline__ void select_in_bin(Ld ld, const Cut& cut, u64 k, u64 n, int ib,
                                              bool comps, u64* o, u32* out_fill,
                                              SubDigit* scratch = nullptr) {
  const u32 t = threadIdx.x, count = cut.count, kleft = (u32)k - cut.above;
  // Every candidate shares the bin's bits: a selection goes on below them.
  const int hi = KB - ROWS_BITS + ib;
  if (count <= ROWS_THREADS && scratch) {
    select_few(ld(t < count ? t : 0), t < count, hi, kleft, *scratch, [&](u64 c) {
      const u32 pos = atomicAdd(out_fill, 1u);
      if (pos < k) o[pos] = slot_of(c, n, ib, comps);
    });
    return;
  }
  if (count <= ROWS_THREADS) {
    // Few candidates: each one's rank among the others (composites are distinct).
    if (t < count) {
      const u64 c = ld(t);
      u32 rank = 0;
#pragma unroll 8
      for (u32 i = 0; i < count; ++i) rank += ld(i) > c;
      if (rank < kleft) {
        const u32 pos = atomicAdd(out_fill, 1u);
        if (pos < k) o[pos] = slot_of(c, n, ib, comps);
      }
    }
    return;
  }
  const u64 tau = block_kth_with<ROWS_THREADS>(
      [&](auto f) {
        // Whole warps each round: the bins are matched across the warp.
        for (u32 b = 0; b < count; b += ROWS_THREADS) {
          const u32 i = b + t;
          f(i < count ? ld(i) : 0, i < count);
        }
      },
      kleft, hi, (u64)cut.bin << hi, true);
  for (u32 i = t; i < count; i += ROWS_THREADS) {
    const u64 c = ld(i);
    if (c >= tau) {
      const u32 pos = atomicAdd(out_fill, 1u);
      if (pos < k) o[pos] = slot_of(c, n, ib, comps);
    }
  }
}

// Reports a row's NaN to the call's record (block-uniform `nans`; thread 0 writes).
template <typename T>
__device__ void report_nan(const T* row, u64 n, u64 r, u32 nans, Global* g) {
  const u32 first = first_nan(row, n);
  if (threadIdx.x == 0) {
    atomicAdd(&g->nan_count, (u64)nans);
    atomicMax(&g->nan_first, ~(r * n + first));  // stored inverted: zero means none
  }
}

// The rank a guess aims at for k: a margin above k of half k (rows differ), at least 64, and at
// most half the way from k to GUESS_SAFE: a warp's slice overflows near there (each holds its share
// of the kept elements, give or take), and a guess interpolated inside a bin misses its rank by a
// part of that bin either way. No guess is made when the rank passes three quarters of the kept
// buffer.
#define GUESS_BUDGET (CARRY_CAP / 4 * 3)
#define GUESS_SAFE (CARRY_CAP / 8 * 7)
__device__ __forceinline__ u64 guess_rank(u64 k) {
  const u64 room = k < GUESS_SAFE ? (GUESS_SAFE - k) / 2 : 0;
  return k + max(min(k / 2, room), 64ull);
}

// The key at which a histogram reaches `rank` elements from the top (it counts the keys from
// `floor` up, at least `rank` of them; c is its cut at `rank`), interpolated inside the bin that
// reaches it: a bin's keys are even steps of the value (an eighth of an octave for f32), over which
// a smooth distribution spreads evenly. NO_GUESS when that bin holds more than `dense` (ties: a key
// inside it keeps all of them or none).
template <typename T>
__device__ __forceinline__ u32 key_at_rank(const Cut& c, u64 rank, u32 floor, u32 dense) {
  const int SHIFT = Ops<T>::KB - ROWS_BITS;
  if (c.count > dense) return NO_GUESS;
  const u64 lo = max((u64)c.bin << SHIFT, (u64)floor), hi = ((u64)c.bin + 1) << SHIFT;
  // rank - above of the bin's count elements lie at or above the key (1 <= rank - above <= count).
  const u64 key = hi - ((hi - lo) * (rank - c.above) + c.count - 1) / c.count;
  return (u32)min(key, (u64)NO_GUESS - 1);
}

// The guess the next row of a block carries, from this row's histogram (of `total` elements; with
// `partial`, only those at or above this row's guess `floor`, `in_bin` of them in the guess's bin)
// and its cut at guess_rank(k): the key at that rank. A partial count short of it keeps this guess
// while it kept at least halfway from k to the rank, else lowers it by the spacing the guess's own
// bin shows (at most a bin).
template <typename T>
__device__ __forceinline__ u32 next_guess(u32 in_bin, const Cut& at_rank, u64 k, bool partial,
                                          u32 floor, u64 total) {
  const int SHIFT = Ops<T>::KB - ROWS_BITS;
  const u64 rank = guess_rank(k);
  if (rank > GUESS_BUDGET) return NO_GUESS;
  if (total >= rank) return key_at_rank<T>(at_rank, rank, partial ? floor : 0, CARRY_CAP);
  if (!partial) return NO_GUESS;
  if (2 * total >= k + rank) return floor;
  const u32 bin = floor >> SHIFT;
  const u64 width = (((u64)bin + 1) << SHIFT) - floor;
  const u64 step =
      in_bin ? min((width * (rank - total) + in_bin - 1) / in_bin, 1ull << SHIFT) : 1ull << SHIFT;
  return floor > step ? (u32)(floor - step) : 0u;
}

// Pairs of 16-byte vectors (32-byte sectors) a thread reads at most for a block's first guess, and
// the sample's margin in standard deviations.
#define SAMPLE_MAX_PAIRS 8
#define SAMPLE_SIGMAS 3.0f

// A block's first guess (it has no row behind it), from a sample of the row into the zeroed
// histogram h (left dirty): pairs of vectors spread evenly over the row, the fewest pairs a thread
// (1, 2, 4 or SAMPLE_MAX_PAIRS, an eighth of the row at most) whose guess expects to keep no more
// than the budget. The guess is the key at which the sample's count from the top passes its
// expectation at the k-th element by SAMPLE_SIGMAS deviations and more, so that the row most likely
// holds at least k from it up; else NO_GUESS. A wrong guess costs a read, never the result.
template <typename T>
__device__ u32 sample_guess(const T* p, u64 n, u64 k, int mag, u32* h) {
  typedef typename Ops<T>::Vec Vec;
  const u32 V = Ops<T>::VEC, t = threadIdx.x;
  const int SHIFT = Ops<T>::KB - ROWS_BITS;
  const RowCut<T> cut(p, n);
  const Vec* vp = (const Vec*)(p + cut.head);
  // Pairs start on a 32-byte boundary.
  const u32 first = ((u64)vp & 16) ? 1u : 0u;
  const u32 pairs = cut.nvec > first ? (cut.nvec - first) / 2 : 0u;
  const u32 most = min((u32)SAMPLE_MAX_PAIRS, pairs / 8 / ROWS_THREADS);
  auto target_of = [&](float drawn) {
    const float expect = (float)k * drawn / (float)n;
    return ceilf(expect + SAMPLE_SIGMAS * (sqrtf(expect) + 1.0f));
  };
  u32 per = 1;
  for (; per <= most; per *= 2) {
    const float drawn = (float)(per * ROWS_THREADS * 2 * V);
    if (target_of(drawn) * ((float)n / drawn) <= GUESS_BUDGET) break;
  }
  if (per > most) return NO_GUESS;
  const u32 draws = per * ROWS_THREADS, stride = pairs / draws;
#pragma unroll 2
  for (u32 u = 0; u < per; ++u) {
    const Vec* at = vp + first + 2 * (u64)((u * ROWS_THREADS + t) * stride);
    const Vec a = at[0], b = at[1];
#pragma unroll
    for (int q = 0; q < (int)V; ++q) {
      atomicAdd(&h[Ops<T>::key_bits(Ops<T>::raw(a, q), mag) >> SHIFT], 1u);
      atomicAdd(&h[Ops<T>::key_bits(Ops<T>::raw(b, q), mag) >> SHIFT], 1u);
    }
  }
  __syncthreads();
  const float drawn = (float)(draws * 2 * V);
  const float target = target_of(drawn);
  if (target > drawn) return NO_GUESS;
  return key_at_rank<T>(find_cut(h, (u64)target), (u64)target, 0,
                        (u32)((float)CARRY_CAP * drawn / (float)n));
}

// A row's output from what pass 1 kept (the warps' slices of `kept`, warp_kept[w] composites in
// slice w, every element of the bins at or above the cut among them): the elements above the
// threshold bin straight into o through out_fill, the bin's into `bin_buf` through bin_fill, and
// their k - above largest by select_in_bin (with `scratch` beside the bin's elements).
template <int KB>
__device__ __forceinline__ void select_kept(const u64* kept, const u32* warp_kept, const Cut& cut,
                                            u64 k, u64 n, int ib, bool comps, u64* o, u32* out_fill,
                                            u64* bin_buf, u32* bin_fill, SubDigit* scratch) {
  const u32 lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const int hi = KB - ROWS_BITS + ib;
  const bool whole = whole_bin(cut, k);
  // Each warp its own slice, as far as it is filled; whole warps each round: warp_slot votes.
  const u32 filled = min(warp_kept[warp], (u32)WARP_KEPT);
  const u64* mine = kept + warp * WARP_KEPT;
  for (u32 b = 0; b < filled; b += 32) {
    const bool valid = b + lane < filled;
    const u64 c = valid ? mine[b + lane] : 0;
    const u32 bin = (u32)(c >> hi);
    const bool take = valid && (bin > cut.bin || (whole && bin == cut.bin));
    const bool keep = valid && !whole && bin == cut.bin;
    const u32 pos = warp_slot(out_fill, take);
    if (take && pos < k) o[pos] = slot_of(c, n, ib, comps);
    const u32 slot = warp_slot(bin_fill, keep);
    if (keep) bin_buf[slot] = c;
  }
  __syncthreads();
  if (!whole)
    select_in_bin<KB>([&](u32 i) { return bin_buf[i]; }, cut, k, n, ib, comps, o, out_fill,
                      scratch);
}

// A row whose threshold bin overflows the buffer (heavy ties: an all-equal row), by the same block:
// a radix selection inside the bin that reads the row once a digit, then a pass that takes every
// element at or above the cut, into o through out_fill.
template <typename T>
__device__ void select_dense(const T* row, u64 n, const Cut& cut, u64 k, int mag, int ib,
                             bool comps, u64* o, u32* out_fill) {
  const u32 t = threadIdx.x;
  const int hi = Ops<T>::KB - ROWS_BITS + ib;
  auto at = [&](u64 i) { return (u64)composite(Ops<T>::key(row[i], mag), i, n, ib); };
  const u64 tau = block_kth_with<ROWS_THREADS>(
      [&](auto f) {
        for (u64 b = 0; b < n; b += ROWS_THREADS) {
          const u64 i = b + t;
          f(i < n ? at(i) : 0, i < n);
        }
      },
      (u32)k - cut.above, hi, (u64)cut.bin << hi, true);
  // Whole warps each round: warp_slot votes.
  for (u64 b = 0; b < n; b += ROWS_THREADS) {
    const u64 i = b + t;
    const u64 c = i < n ? at(i) : 0;
    const bool take = i < n && c >= tau;
    const u32 pos = warp_slot(out_fill, take);
    if (take && pos < k) o[pos] = comps ? c : i;
  }
}

// Output flags of the one-block kernel: descending (else by index); benchmarks leave out the sort
// (OUT_UNSORTED) or every write (OUT_NONE) to time them.
#define OUT_DESC 1
#define OUT_UNSORTED 2
#define OUT_NONE 4
// Rows go to the blocks in a fixed order (block b takes rows b, b + grid, ...) instead of from the
// call's counter: a benchmark's comparison.
#define ROWS_STATIC 8

// The value of a selected element from its composite: its key inverted where the key says which
// value it was (every key but a zero's, which both zeros share, and a NaN's; by magnitude the sign
// is lost), else read from the row.
template <typename T>
__device__ __forceinline__ T value_of(const T* row, u64 c, u64 n, int ib, int mag) {
  const u32 MAXK = (Ops<T>::KB == 32) ? 0xffffffffu : 0xffffu, SIGN = 1u << (Ops<T>::KB - 1);
  const u32 key = (u32)(c >> ib);
  if (mag || key == SIGN || key == MAXK) return row[index_of_comp(c, n, ib)];
  return Ops<T>::of_bits(key_raw<T>(key));
}

// Values a thread loads at once when it writes its part of the output: the loads that go to the row
// (by magnitude) then wait for memory together, not once each.
#define GATHER_BATCH 4

// Writes the composites placed[0..k), in that order, as values and i64 indices: coalesced stores.
template <typename T>
__device__ __forceinline__ void write_placed(const T* row, u64 n, u64 k, int mag, int ib,
                                             const u64* placed, T* vals, long long* idx_out) {
  const u32 t = threadIdx.x;
  for (u32 b = 0; b < k; b += GATHER_BATCH * ROWS_THREADS) {
    T v[GATHER_BATCH];
#pragma unroll
    for (int q = 0; q < GATHER_BATCH; ++q) {
      const u32 i = b + q * ROWS_THREADS + t;
      if (i < k) v[q] = value_of(row, placed[i], n, ib, mag);
    }
#pragma unroll
    for (int q = 0; q < GATHER_BATCH; ++q) {
      const u32 i = b + q * ROWS_THREADS + t;
      if (i < k) {
        vals[i] = v[q];
        idx_out[i] = (long long)index_of_comp(placed[i], n, ib);
      }
    }
  }
}

// Index order from a bitmap of the row's selected indices (n bits): each thread owns a run of words
// and gives each word the count of selected indices before it; a slot's place is its word's count
// and the bits below it in its word. The slots (composites in o) are placed in `buf` after the
// bitmap and the counts (words + k <= ROWS_CAP), then written out in order: no sort, no read of the
// row.
template <typename T>
__device__ __forceinline__ void write_by_index(const T* row, u64 n, u64 k, int mag, int ib,
                                               const u64* o, u64* buf, T* vals,
                                               long long* idx_out) {
  typedef cub::BlockScan<u32, ROWS_THREADS> Scan;
  __shared__ typename Scan::TempStorage scan;
  const u32 t = threadIdx.x, words = (u32)((n + 31) / 32);
  u32* bits = (u32*)buf;
  u32* before = bits + words;
  u64* placed = buf + words;
  const u32 per = (words + ROWS_THREADS - 1) / ROWS_THREADS;
  const u32 from = min(words, t * per), to = min(words, from + per);
  for (u32 i = t; i < words; i += ROWS_THREADS) bits[i] = 0;
  __syncthreads();
  for (u32 i = t; i < k; i += ROWS_THREADS) {
    const u32 j = (u32)index_of_comp(o[i], n, ib);
    atomicOr(&bits[j >> 5], 1u << (j & 31));
  }
  __syncthreads();
  u32 mine = 0;
  for (u32 w = from; w < to; ++w) mine += __popc(bits[w]);
  u32 pos;
  Scan(scan).ExclusiveSum(mine, pos);
  for (u32 w = from; w < to; ++w) {
    before[w] = pos;
    pos += __popc(bits[w]);
  }
  __syncthreads();
  for (u32 i = t; i < k; i += ROWS_THREADS) {
    const u64 c = o[i];
    const u32 j = (u32)index_of_comp(c, n, ib), w = j >> 5;
    placed[before[w] + __popc(bits[w] & ((1u << (j & 31)) - 1))] = c;
  }
  __syncthreads();
  write_placed(row, n, k, mag, ib, placed, vals, idx_out);
}

// Descending order of k <= FUSED_MAX_K distinct sort keys in buf[0..k): each warp ranks the keys of
// its segment (up to 4 a lane) among the segment and stores them sorted after the keys; a key's
// place is then its place in its segment plus, for every other segment, how many of its keys are
// larger (a binary search). Two block barriers, where a bitonic sort of 512 takes 45. `put(place,
// key)` takes each key's place.
template <typename Put>
__device__ __forceinline__ void sort_desc(u64* buf, u64 k, Put put) {
  const int SEGS = ROWS_THREADS / 32, PER = FUSED_MAX_K / ROWS_THREADS;
  const u32 lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const u32 seg = (u32)(k + SEGS - 1) / SEGS;
  auto seg_from = [&](u32 w) { return min((u32)k, w * seg); };
  const u32 s0 = seg_from(warp), s1 = seg_from(warp + 1);
  u64 mine[PER];
  u32 rank[PER];
#pragma unroll
  for (int q = 0; q < PER; ++q) {
    const u32 i = s0 + lane + 32 * q;
    mine[q] = i < s1 ? buf[i] : ~0ull;
    rank[q] = 0;
  }
  for (u32 i = s0; i < s1; ++i) {
    const u64 b = buf[i];
#pragma unroll
    for (int q = 0; q < PER; ++q) rank[q] += b > mine[q];
  }
  u64* sorted = buf + FUSED_MAX_K;
#pragma unroll
  for (int q = 0; q < PER; ++q)
    if (s0 + lane + 32 * q < s1) sorted[s0 + rank[q]] = mine[q];
  __syncthreads();
#pragma unroll
  for (int q = 0; q < PER; ++q) {
    if (s0 + lane + 32 * q >= s1) continue;
    u32 place = rank[q];
    for (u32 w = 0; w < SEGS; ++w) {
      if (w == warp) continue;
      const u32 a = seg_from(w);
      u32 lo = a, hi = seg_from(w + 1);
      while (lo < hi) {
        const u32 mid = (lo + hi) / 2;
        if (sorted[mid] > mine[q])
          lo = mid + 1;
        else
          hi = mid;
      }
      place += lo - a;
    }
    put(place, mine[q]);
  }
}

// Writes a finished row's k selected elements (composites in o, any order) as values and i64
// indices:
// by index from a bitmap of the row when it fits `buf` (ROWS_CAP slots) beside the placed slots,
// else (and by composite descending) by sorting keys that keep each element's key (composite + 1,
// or the index's complement above the key), placing the composites in `buf` and writing them out in
// order.
template <typename T>
__device__ __forceinline__ void write_sorted(const T* row, u64 n, u64 k, int mag, int ib, int flags,
                                             const u64* o, u64* buf, T* vals, long long* idx_out) {
  if (flags & OUT_NONE) return;
  const u32 t = threadIdx.x;
  const bool desc = flags & OUT_DESC;
  if (flags & OUT_UNSORTED) {
    write_placed(row, n, k, mag, ib, o, vals, idx_out);
    return;
  }
  if (!desc && (n + 31) / 32 + k <= ROWS_CAP) {
    write_by_index(row, n, k, mag, ib, o, buf, vals, idx_out);
    return;
  }
  auto sort_key = [&](u64 c) {
    return desc ? c + 1 : ((u64)(0xffffffffu - (u32)index_of_comp(c, n, ib)) << 32) | (c >> ib);
  };
  auto comp_of = [&](u64 s) {
    return desc ? s - 1 : ((s & 0xffffffffull) << ib) | (n - 1 - (0xffffffffu - (u32)(s >> 32)));
  };
  for (u32 i = t; i < k; i += ROWS_THREADS) buf[i] = sort_key(o[i]);
  __syncthreads();
  u64* placed = buf + 2 * FUSED_MAX_K;
  sort_desc(buf, k, [&](u32 place, u64 s) { placed[place] = comp_of(s); });
  __syncthreads();
  write_placed(row, n, k, mag, ib, placed, vals, idx_out);
}

// One block per row, every row finished by its block (a threshold bin over the buffer by the dense
// selection). With `vals`, the block also writes the row's sorted output (k <= FUSED_MAX_K). A
// block starts on row blockIdx.x and takes each further row from the call's counter once it has
// read the row before: in a fixed order every block took its share of rows, and the call waited on
// the few whose rows had taken a second read (the SMs sat idle a quarter of its time).
template <typename T>
__device__ void rows_topk(const T* x, u64 n, u64 rows, u64 k, int mag, int ib, int count_nan,
                          u64* out, RowRun* run, Global* g, T* vals, long long* idx_out,
                          int flags) {
  __shared__ __align__(16) union {
    struct {
      u32 hist[ROWS_BINS];
      u64 kept[CARRY_CAP];
    } p1;
    u64 cand[ROWS_CAP];
  } sm;
  __shared__ u32 s_out, s_cand, s_kept, s_kept_most;
  // Reads of the row (thread 0 counts them): the call's record keeps them per row.
  __shared__ u32 s_reads;
  __shared__ u32 warp_kept[ROWS_THREADS / 32];
  // With the sorted output written here and k <= SMEM_SLOTS, the row's slots stay in shared memory
  // (`out` is then unused): they are read back at once, and in global memory they cost a write and
  // a read of rows x k words.
  __shared__ u64 s_slots[SMEM_SLOTS];
  __shared__ u32 chunk_max[ROWS_CHUNKS];
  __shared__ u64 s_next;
  const u32 t = threadIdx.x;
  // A block that writes the output keeps each slot's composite: its value then comes from its key,
  // not from a read of the row (which has most likely left L2 by then).
  const bool comps = vals != nullptr;
  u32 guess = NO_GUESS;
  const bool dealt = !(flags & ROWS_STATIC);
  bool first = true;
  for (u64 r = blockIdx.x; r < rows; first = false) {
    const T* row = x + r * n;
    zero_hist(sm.p1.hist);
    if (t == 0) s_out = s_cand = s_kept = s_kept_most = s_reads = 0;
    __syncthreads();
    // With a guess the row is read once when the elements from it up hold the top k and fit the
    // buffer (their exact count says so). A guess that kept k or more but overflowed the buffer
    // still counted every element from it up: the cut lies among them, and one more read compacts
    // the row.
    // A guess that fell short of k is lowered, and a second read adds the elements between the two.
    // Otherwise the full histogram takes a read of its own, then the compaction another.
    bool read_once = false, from_guess = false;
    if (first) {
      guess = sample_guess(row, n, k, mag, sm.p1.hist);
      zero_hist(sm.p1.hist);
      __syncthreads();
    }
    if (guess != NO_GUESS) {
      guess_pass(row, n, mag, ib, guess, NO_GUESS, sm.p1.hist, sm.p1.kept, warp_kept, &s_kept,
                 &s_kept_most);
      if (t == 0) ++s_reads;
      __syncthreads();
      if (s_kept < k) {
        const u32 in_bin = sm.p1.hist[guess >> (Ops<T>::KB - ROWS_BITS)];
        const u32 lower = next_guess<T>(in_bin, Cut{}, k, true, guess, s_kept);
        __syncthreads();
        if (lower < guess) {
          guess_pass(row, n, mag, ib, lower, guess, sm.p1.hist, sm.p1.kept, warp_kept, &s_kept,
                     &s_kept_most);
          if (t == 0) ++s_reads;
          __syncthreads();
          guess = lower;
        }
      }
      from_guess = s_kept >= k;
      read_once = from_guess && s_kept_most <= WARP_KEPT;
      if (!from_guess) {
        zero_hist(sm.p1.hist);
        __syncthreads();
      }
    }
    if (!from_guess) {
      hist_pass(row, n, mag, sm.p1.hist, chunk_max);
      if (t == 0) ++s_reads;
      __syncthreads();
    }
    const u32 nans = count_nan ? sm.p1.hist[NAN_BIN] : 0;
    // Read before find_cut's barrier: select_kept overwrites the histogram.
    const u32 guess_bin_count =
        guess == NO_GUESS ? 0u : sm.p1.hist[guess >> (Ops<T>::KB - ROWS_BITS)];
    Cut at_rank;
    Cut cut = find_cut(sm.p1.hist, k, guess_rank(k), &at_rank);
    // Keys below it count nowhere in the histogram.
    const u32 floor = from_guess ? guess : 0u;
    if (from_guess && !read_once && overflows(cut, k, ROWS_CAP)) {
      // Ties past the candidate buffer in the threshold bin: the dense selection reads the full
      // histogram's cut.
      zero_hist(sm.p1.hist);
      __syncthreads();
      hist_pass(row, n, mag, sm.p1.hist, chunk_max);
      if (t == 0) ++s_reads;
      __syncthreads();
      cut = find_cut(sm.p1.hist, k, guess_rank(k), &at_rank);
      from_guess = false;
    }
    guess = next_guess<T>(guess_bin_count, at_rank, k, from_guess, guess, from_guess ? s_kept : n);
    if (nans) report_nan(row, n, r, nans, g);
    u64* o = vals && k <= SMEM_SLOTS ? s_slots : out + r * k;
    // A threshold bin of at most ROWS_THREADS elements (they lie at the start of sm) is selected
    // with the room after them.
    SubDigit* scratch = (SubDigit*)(sm.cand + ROWS_THREADS);
    const bool dense = !read_once && overflows(cut, k, ROWS_CAP);
    if (read_once) {
      // The histogram is spent: the bin's elements go where it was.
      select_kept<Ops<T>::KB>(sm.p1.kept, warp_kept, cut, k, n, ib, comps, o, &s_out,
                              (u64*)sm.p1.hist, &s_cand, scratch);
    } else if (dense) {
      select_dense(row, n, cut, k, mag, ib, comps, o, &s_out);
      if (t == 0) ++s_reads;
    } else {
      compact_pass(row, n, 0, n, mag, ib, comps, cut, k, o, &s_out, sm.cand, &s_cand, ROWS_CAP,
                   from_guess ? nullptr : chunk_max, from_guess ? floor : 0u);
      if (t == 0) ++s_reads;
      __syncthreads();
      if (!whole_bin(cut, k))
        select_in_bin<Ops<T>::KB>([&](u32 i) { return sm.cand[i]; }, cut, k, n, ib, comps, o,
                                  &s_out, scratch);
    }
    // The next row, asked for once this one is read: its atomic's latency passes under the output.
    u64 next = r + gridDim.x;
    if (t == 0 && dealt) next = gridDim.x + atomicAdd(&g->next_item, 1ull);
    __syncthreads();
    if (vals) write_sorted(row, n, k, mag, ib, flags, o, sm.cand, vals + r * k, idx_out + r * k);
    if (t == 0) {
      s_next = next;
      // The dense selection keeps its status for the call's record; `attempts` counts the row's
      // reads (1: its guess held; the dense selection's count as one).
      run[r].status = dense ? ROW_FALLBACK : ROW_OK;
      run[r].attempts = s_reads;
    }
    __syncthreads();
    r = s_next;
  }
}

// Split rows, pass 1: part c of row r (items r * parts + c, parts of `part` elements) into the
// row's histogram; the last part of a row finds its cut (a row that overflows the buffer is marked
// for the dense fallback) and reports its NaN.
template <typename T>
__device__ void rows_split_hist(const T* x, u64 n, u64 rows, u64 part, u32 parts, u64 k, int mag,
                                int count_nan, SplitRow* st, RowRun* run, Global* g) {
  __shared__ __align__(16) u32 h[ROWS_BINS];
  const u32 t = threadIdx.x;
  for (u64 item = blockIdx.x; item < rows * parts; item += gridDim.x) {
    const u64 r = item / parts, c = item % parts;
    const u64 from = c * part, len = min(part, n - from);
    zero_hist(h);
    __syncthreads();
    hist_pass(x + r * n + from, len, mag, h, nullptr);
    __syncthreads();
    SplitRow& s = st[r];
    for (u32 i = t; i < ROWS_BINS; i += ROWS_THREADS)
      if (h[i]) atomicAdd(&s.hist[i], h[i]);
    if (block_any_last(&s.arrived_hist, parts)) {
      for (u32 i = t; i < ROWS_BINS; i += ROWS_THREADS) h[i] = __ldcg(&s.hist[i]);
      __syncthreads();
      const u32 nans = count_nan ? h[NAN_BIN] : 0;
      const Cut cut = find_cut(h, k);
      if (nans) report_nan(x + r * n, n, r, nans, g);
      if (t == 0) {
        s.bin = cut.bin;
        s.above = cut.above;
        s.count = cut.count;
        if (overflows(cut, k, SPLIT_CAP)) run[r].status = ROW_FALLBACK;
      }
    }
    __syncthreads();
  }
}

// Split rows, pass 2, items in reverse order (the last read first): part c of row r into the row's
// output and candidates; the last part of a row selects inside its threshold bin.
template <typename T>
__device__ void rows_split_compact(const T* x, u64 n, u64 rows, u64 part, u32 parts, u64 k, int mag,
                                   int ib, SplitRow* st, u64* cand, u64* out, RowRun* run) {
  const u64 items = rows * parts;
  for (u64 i = blockIdx.x; i < items; i += gridDim.x) {
    const u64 item = items - 1 - i;
    const u64 r = item / parts, c = item % parts;
    if (__ldcg(&run[r].status) == ROW_FALLBACK) continue;
    SplitRow& s = st[r];
    const Cut cut{__ldcg(&s.bin), __ldcg(&s.above), __ldcg(&s.count)};
    const u64 from = c * part, len = min(part, n - from);
    u64* o = out + r * k;
    u64* rc = cand + r * SPLIT_CAP;
    compact_pass(x + r * n + from, len, from, n, mag, ib, false, cut, k, o, &s.out_fill, rc,
                 &s.cand_fill, SPLIT_CAP, nullptr, 0);
    if (block_any_last(&s.arrived_compact, parts)) {
      if (!whole_bin(cut, k))
        select_in_bin<Ops<T>::KB>([&](u32 j) { return __ldcg(rc + j); }, cut, k, n, ib, false, o,
                                  &s.out_fill);
      if (threadIdx.x == 0) run[r].status = ROW_OK;
    }
    __syncthreads();
  }
}

#define ROWS_KERNELS(SUF, T)                                                                       \
  extern "C" __global__ void __launch_bounds__(ROWS_THREADS, ROWS_BLOCKS_PER_SM)                   \
      rows_topk_##SUF(const T* x, u64 n, u64 rows, u64 k, int mag, int ib, int count_nan,          \
                      u64* out, RowRun* run, Global* g, T* vals, long long* idx_out, int flags) {  \
    dependent_launch_entry();                                                                      \
    rows_topk<T>(x, n, rows, k, mag, ib, count_nan, out, run, g, vals, idx_out, flags);            \
  }                                                                                                \
  extern "C" __global__ void __launch_bounds__(ROWS_THREADS, ROWS_BLOCKS_PER_SM)                   \
      rows_split_hist_##SUF(const T* x, u64 n, u64 rows, u64 part, u32 parts, u64 k, int mag,      \
                            int count_nan, SplitRow* st, RowRun* run, Global* g) {                 \
    dependent_launch_entry();                                                                      \
    rows_split_hist<T>(x, n, rows, part, parts, k, mag, count_nan, st, run, g);                    \
  }                                                                                                \
  extern "C" __global__ void __launch_bounds__(ROWS_THREADS, ROWS_BLOCKS_PER_SM)                   \
      rows_split_compact_##SUF(const T* x, u64 n, u64 rows, u64 part, u32 parts, u64 k, int mag,   \
                               int ib, SplitRow* st, u64* cand, u64* out, RowRun* run) {           \
    dependent_launch_entry();                                                                      \
    rows_split_compact<T>(x, n, rows, part, parts, k, mag, ib, st, cand, out, run);                \
  }

ROWS_KERNELS(f32, float)
ROWS_KERNELS(f16, __half)
ROWS_KERNELS(bf16, __nv_bfloat16)
