// Shared definitions of the Prof-K kernels: element keys, the (key, index) composite that makes
// every element distinct, and the per-row state records that the Rust side allocates (layouts
// mirrored in src/cuda/abi.rs).
#pragma once
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned __int128 u128;

// Every kernel's first statement. A launch may let a kernel's blocks start while the kernel before
// it on the stream is still running (programmatic dependent launch, src/cuda/launch.rs), which
// hides the launch latency between short kernels: wait for that kernel's completion and its memory
// before anything else, then let the next kernel's blocks be placed while this one runs. Both are
// no-ops on a launch without that attribute.
__device__ __forceinline__ void dependent_launch_entry() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

enum DType { DT_F32 = 0, DT_F16 = 1, DT_BF16 = 2 };
enum RowStatus { ROW_PENDING = 0, ROW_OK = 1, ROW_FALLBACK = 2 };

// One radix selection in flight for one row. The threshold composite is built digit by digit in
// `prefix`; `kleft` counts what is still to be taken among the elements matching it.
struct RowSel {
  u64 pre_lo, pre_hi;
  u64 kleft;
  u64 tmin;  // smallest selected composite (threshold finalization)
  u32 done, arrivals;
  u64 pad;
};
static_assert(sizeof(RowSel) == 48, "RowSel: the size its Rust mirror (src/cuda/abi.rs) asserts");

// One row of a Prof-K call: the filter's counter (exact R), the outcome and the output fill level.
struct RowRun {
  u64 counter;
  u64 retained;
  u64 out_count;
  u32 status, attempts;
  u32 arrivals, recall_fail;
  u32 overflow;
  // the largest key the filter kept this attempt (bounds the buffer with the threshold)
  u32 max_key;
};
static_assert(sizeof(RowRun) == 48, "RowRun: the size its Rust mirror (src/cuda/abi.rs) asserts");

struct Global {
  u64 nan_count;
  u64 nan_first;
  // work counter of a launch that deals its items (accumulation pass, row kernel)
  u64 next_item;
  u64 rows_finished;  // rows whose filter outcome is recorded, this attempt (filter.cuh)
};
static_assert(sizeof(Global) == 32, "Global: the size its Rust mirror (src/cuda/abi.rs) asserts");

// Order-preserving key of raw IEEE bits of width W with MANT mantissa bits (the CPU path's key):
// both zeros share one key and every NaN maps to the largest key.
template <int W, int MANT>
__device__ __forceinline__ u32 ord_key(u32 b, int mag) {
  const u32 MAXK = (W == 32) ? 0xffffffffu : 0xffffu;
  const u32 SIGN = 1u << (W - 1);
  const u32 INF = SIGN - (1u << MANT);
  u32 abs = b & (MAXK >> 1);
  u32 o = mag ? abs : (abs == 0 ? SIGN : ((b & SIGN) ? (~b & MAXK) : (b | SIGN)));
  return abs > INF ? MAXK : o;
}

template <typename T> struct Ops;
template <> struct Ops<float> {
  enum { KB = 32, VEC = 4 };
  static constexpr u32 NEG_INF = 0xff800000u;
  typedef float4 Vec;
  static __device__ __forceinline__ u32 key(float v, int mag) {
    return ord_key<32, 23>(__float_as_uint(v), mag);
  }
  static __device__ __forceinline__ bool nan(float v) { return v != v; }
  // Raw bits of lane q of a vector, their key and their NaN test (the filter works on bits).
  static __device__ __forceinline__ u32 raw(const Vec& v, int q) {
    return __float_as_uint(q == 0 ? v.x : q == 1 ? v.y : q == 2 ? v.z : v.w);
  }
  static __device__ __forceinline__ u32 raw1(float v) { return __float_as_uint(v); }
  static __device__ __forceinline__ float value(const Vec& v, int q) {
    return __uint_as_float(raw(v, q));
  }
  static __device__ __forceinline__ float from_bits(u32 b) { return __uint_as_float(b); }
  static __device__ __forceinline__ float of_bits(u32 b) { return __uint_as_float(b); }
  static __device__ __forceinline__ u32 key_bits(u32 b, int mag) { return ord_key<32, 23>(b, mag); }
  static __device__ __forceinline__ bool nan_bits(u32 b) { return (b & 0x7fffffffu) > 0x7f800000u; }
};

__device__ __forceinline__ u32 half_lane(const uint4& v, int q) {
  u32 w = (q >> 1) == 0 ? v.x : (q >> 1) == 1 ? v.y : (q >> 1) == 2 ? v.z : v.w;
  return (q & 1) ? (w >> 16) : (w & 0xffffu);
}
template <> struct Ops<__half> {
  enum { KB = 16, VEC = 8 };
  static constexpr u32 NEG_INF = 0xfc00u;
  typedef uint4 Vec;
  static __device__ __forceinline__ u32 key(__half v, int mag) {
    return ord_key<16, 10>(__half_as_ushort(v), mag);
  }
  static __device__ __forceinline__ bool nan(__half v) {
    return (__half_as_ushort(v) & 0x7fff) > 0x7c00;
  }
  static __device__ __forceinline__ u32 raw(const Vec& v, int q) { return half_lane(v, q); }
  static __device__ __forceinline__ u32 raw1(__half v) { return __half_as_ushort(v); }
  static __device__ __forceinline__ float from_bits(u32 b) {
    return __half2float(__ushort_as_half((unsigned short)b));
  }
  static __device__ __forceinline__ __half of_bits(u32 b) {
    return __ushort_as_half((unsigned short)b);
  }
  static __device__ __forceinline__ float value(const Vec& v, int q) {
    return from_bits(raw(v, q));
  }
  static __device__ __forceinline__ u32 key_bits(u32 b, int mag) { return ord_key<16, 10>(b, mag); }
  static __device__ __forceinline__ bool nan_bits(u32 b) { return (b & 0x7fffu) > 0x7c00u; }
};
template <> struct Ops<__nv_bfloat16> {
  enum { KB = 16, VEC = 8 };
  static constexpr u32 NEG_INF = 0xff80u;
  typedef uint4 Vec;
  static __device__ __forceinline__ u32 key(__nv_bfloat16 v, int mag) {
    return ord_key<16, 7>(__bfloat16_as_ushort(v), mag);
  }
  static __device__ __forceinline__ bool nan(__nv_bfloat16 v) {
    return (__bfloat16_as_ushort(v) & 0x7fff) > 0x7f80;
  }
  static __device__ __forceinline__ u32 raw(const Vec& v, int q) { return half_lane(v, q); }
  static __device__ __forceinline__ u32 raw1(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }
  static __device__ __forceinline__ float from_bits(u32 b) { return __uint_as_float(b << 16); }
  static __device__ __forceinline__ __nv_bfloat16 of_bits(u32 b) {
    return __ushort_as_bfloat16((unsigned short)b);
  }
  static __device__ __forceinline__ float value(const Vec& v, int q) {
    return from_bits(raw(v, q));
  }
  static __device__ __forceinline__ u32 key_bits(u32 b, int mag) { return ord_key<16, 7>(b, mag); }
  static __device__ __forceinline__ bool nan_bits(u32 b) { return (b & 0x7fffu) > 0x7f80u; }
};

// The raw bits whose key by value is `key` (inverse of ord_key with mag = 0): exact for every key
// but a zero's (both zeros share it; this gives +0) and the largest (every NaN's).
template <typename T>
__device__ __forceinline__ u32 key_raw(u32 key) {
  const int W = Ops<T>::KB;
  const u32 MAXK = (W == 32) ? 0xffffffffu : 0xffffu;
  const u32 SIGN = 1u << (W - 1);
  return (key & SIGN) ? (key & ~SIGN) : (~key & MAXK);
}

// The value whose key is `key` (inverse of ord_key; the largest key gives a NaN): for every element
// x, !(x < value) holds exactly when key(x) >= key (NaN included), with x taken by magnitude when
// `mag`.
template <typename T>
__device__ __forceinline__ float key_value(u32 key, int mag) {
  const u32 MAXK = (Ops<T>::KB == 32) ? 0xffffffffu : 0xffffu;
  u32 b = mag ? key : key_raw<T>(key);
  if (key == MAXK) b = MAXK >> 1;  // a NaN
  return Ops<T>::from_bits(b);
}

// Composite of an element of a row of n: key above, n-1-index below. Larger composite = ranks
// higher, and no two elements of a row share one, so "the t-th largest" is always a single element.
__device__ __forceinline__ u128 composite(u32 key, u64 idx, u64 n, int ib) {
  return ((u128)key << ib) | (u128)(n - 1 - idx);
}

__device__ __forceinline__ u128 load_prefix(const RowSel& s) {
  return ((u128)s.pre_hi << 64) | s.pre_lo;
}

// Adds one to bin `bin` of the shared histogram h (no bin: ~0u) for every lane of the warp, once
// per bin: the leading digits of a sample, a buffer or an ordered slice are shared by most of its
// lanes, which would otherwise queue on one counter. Every lane of the warp calls it.
__device__ __forceinline__ void count_bin(u32* h, u32 bin) {
  const unsigned same = __match_any_sync(0xffffffffu, bin);
  if (bin != ~0u && (int)(threadIdx.x & 31) == __ffs(same) - 1)
    atomicAdd(&h[bin], (u32)__popc(same));
}

// The filter's histogram of one row's kept keys (filter.cuh), read by its buffer's selection
// (select.cu `select_by_bins`): a kept key's bin is its distance d above the threshold's key, d
// itself below 64, else 64 bins for each power of two by the six bits after the leading one. Bins
// keep the keys' order, and a bin is never wider than 1/64 of the distances it holds, so the bin
// holding the k-th largest holds few of the buffer's keys unless they crowd near one value.
#define FILTER_BINS 1728

__device__ __forceinline__ u32 filter_bin(u32 d) {
  if (d < 64) return d;
  const int e = 31 - __clz(d);
  return (u32)(e - 5) * 64 + ((d >> (e - 6)) & 63);
}

// Thread t's PER bins of a histogram `h` of FILTER_BINS, from bin FILTER_BINS-1-t*PER downwards,
// into `own`; returns their sum, so that a scan of the sums over the threads counts from the top
// bin down.
template <int PER>
__device__ __forceinline__ u32 bins_from_top(const u32* h, u32 (&own)[PER]) {
  u32 sum = 0;
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int b = FILTER_BINS - 1 - ((int)threadIdx.x * PER + i);
    own[i] = b >= 0 ? __ldcg(&h[b]) : 0;
    sum += own[i];
  }
  return sum;
}

// The smallest and largest distance of bin b.
__device__ __forceinline__ void filter_bin_range(u32 b, u64& lo, u64& hi) {
  if (b < 64) {
    lo = hi = b;
    return;
  }
  const int e = (int)(b / 64) + 5;
  lo = (u64)(64 + b % 64) << (e - 6);
  hi = lo + (1ull << (e - 6)) - 1;
}

// Read a value another block wrote with atomics, bypassing L1.
__device__ __forceinline__ u64 ld_l2(const u64* p) { return __ldcg(p); }

// Block-uniform flag by thread 0.
__device__ __forceinline__ bool block_any_last(u32* counter, u32 total) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == total - 1;
  __syncthreads();
  return last;
}

// The rows a launch works on: those of a device-side list (built by classify_rows after a filter
// pass, so that later stages touch only the rows that need them), or all rows.
struct RowList {
  const u32* ids;    // null: every row
  const u32* count;  // number of listed rows (device)
};
static_assert(sizeof(RowList) == 16, "RowList: the size its Rust mirror (src/cuda/abi.rs) asserts");

__device__ __forceinline__ u64 list_len(const RowList& l, u64 rows) {
  return l.ids ? *l.count : rows;
}
__device__ __forceinline__ u64 list_row(const RowList& l, u64 i) { return l.ids ? l.ids[i] : i; }

// Lists of the rows in each status (pending, ok, fallback: 3 x rows ids, then 3 counts), by one
// block once every row's outcome is recorded; the statuses are read past L1 (other blocks wrote
// them).
__device__ inline void classify_body(const RowRun* run, u64 rows, u32* lists, u32* counts) {
  __shared__ u32 fill[3];
  if (threadIdx.x < 3) fill[threadIdx.x] = 0;
  __syncthreads();
  for (u64 r = threadIdx.x; r < rows; r += blockDim.x) {
    const u32 st = __ldcg(&run[r].status);
    lists[st * rows + atomicAdd(&fill[st], 1u)] = (u32)r;
  }
  __syncthreads();
  if (threadIdx.x < 3) counts[threadIdx.x] = fill[threadIdx.x];
}

// Next work item of a grid-stride loop over rows x cpr items. An inactive row is skipped whole: the
// next item is the first one of a later row that this block owns, so gated launches cost O(rows).
__device__ __forceinline__ u64 next_item(u64 item, u64 cpr, bool skip_row) {
  const u64 g = gridDim.x;
  if (!skip_row) return item + g;
  u64 nb = (item / cpr + 1) * cpr;
  return item + (nb - item + g - 1) / g * g;
}
