// Device helpers of the `sort` baseline: every element of every row as a sort key, then the first k
// of each sorted row. The sorting itself is CUB's radix sort (cub_sort.cu). The `radix` baseline is
// the radix selection of select.cu run over the dense input.
#include "common.cuh"

// Composite (key, n-1-index) of every element: one sort by it descending ranks a row, ties by
// index.
template <typename T>
__device__ void all_composite(const T* x, u64 n, u64 total, int mag, int ib, u64* out) {
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (u64)gridDim.x * blockDim.x)
    out[i] = (u64)composite(Ops<T>::key(x[i], mag), i % n, n, ib);
}

// Keys and row-local indices in index order, for composites wider than 64 bits: a stable sort of
// the keys alone then keeps ties in index order.
template <typename T>
__device__ void all_keys(const T* x, u64 n, u64 total, int mag, u32* keys, u64* idx) {
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (u64)gridDim.x * blockDim.x) {
    keys[i] = Ops<T>::key(x[i], mag);
    idx[i] = i % n;
  }
}

// First k slots of each sorted row, as row-local indices (decoded from composites when ib >= 0).
extern "C" __global__ void take_head(const u64* sorted, u64 n, u64 k, u64 rows, int ib, u64* out) {
  dependent_launch_entry();
  const u64 total = rows * k;
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (u64)gridDim.x * blockDim.x) {
    u64 r = i / k, j = i % k;
    u64 s = sorted[r * n + j];
    out[i] = ib >= 0 ? n - 1 - (ib == 64 ? s : (s & ((1ull << ib) - 1))) : s;
  }
}

#define BASE_KERNELS(SUF, T)                                                                       \
  extern "C" __global__ void all_composite_##SUF(const T* x, u64 n, u64 total, int mag, int ib,    \
                                                 u64* out) {                                       \
    dependent_launch_entry();                                                                      \
    all_composite<T>(x, n, total, mag, ib, out);                                                   \
  }                                                                                                \
  extern "C" __global__ void all_keys_##SUF(const T* x, u64 n, u64 total, int mag, u32* keys,      \
                                            u64* idx) {                                            \
    dependent_launch_entry();                                                                      \
    all_keys<T>(x, n, total, mag, keys, idx);                                                      \
  }

BASE_KERNELS(f32, float)
BASE_KERNELS(f16, __half)
BASE_KERNELS(bf16, __nv_bfloat16)

// Keeps the stream busy for `ns` nanoseconds: a benchmark queues a call behind it, so that the
// call's kernels run back to back however long the host takes to queue them.
extern "C" __global__ void spin_ns(u64 ns) {
  dependent_launch_entry();
  u64 t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

// The NaN count and the first NaN's index of the whole input, for the selections whose passes do
// not count them (the baselines).
template <typename T>
__device__ void nan_scan(const T* x, u64 total, Global* g) {
  u64 cnt = 0, first = ~0ull;
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (u64)gridDim.x * blockDim.x)
    if (Ops<T>::nan(x[i])) {
      ++cnt;
      if (i < first) first = i;
    }
  if (cnt) {
    atomicAdd(&g->nan_count, cnt);
    atomicMax(&g->nan_first, ~first);  // stored inverted: zero means none
  }
}

#define NAN_SCAN(SUF, T)                                                                        \
  extern "C" __global__ void nan_scan_##SUF(const T* x, u64 total, Global* g) {              \
    dependent_launch_entry();                                                                   \
    nan_scan<T>(x, total, g);                                                                   \
  }

NAN_SCAN(f32, float)
NAN_SCAN(f16, __half)
NAN_SCAN(bf16, __nv_bfloat16)
