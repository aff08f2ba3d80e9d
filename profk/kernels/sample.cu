// Stages 1 and 2 of Prof-K on a dense input (the scheme is described in sample.cuh).
#include "sample.cuh"

// The key of element idx of row r of the input.
template <typename T>
struct DenseKey {
  const T* x;
  u64 n;
  int mag;
  __device__ __forceinline__ u32 operator()(u64 r, u64 idx) const {
    return Ops<T>::key(x[r * n + idx], mag);
  }
};
template <typename T>
__device__ __forceinline__ DenseKey<T> dense_key(const SampleArgs& a) {
  return DenseKey<T>{(const T*)a.x, a.n, a.mag};
}

#define SAMPLE_SELECT(SUF, T)                                                                      \
  extern "C" __global__ void __launch_bounds__(1024)                                               \
      sample_select_##SUF(SampleArgs a, RowSel* sel, u32 t, int ib, int tb) {                      \
    dependent_launch_entry();                                                                      \
    sample_select_body<1024>(a, sel, t, ib, tb, dense_key<T>(a));                                  \
  }                                                                                                \
  extern "C" __global__ void __launch_bounds__(256)                                                \
      sample_select_small_##SUF(SampleArgs a, RowSel* sel, u32 t, int ib, int tb) {                \
    dependent_launch_entry();                                                                      \
    sample_select_body<256>(a, sel, t, ib, tb, dense_key<T>(a));                                   \
  }

#define SAMPLE_SPREAD_PER(SUF, T, PER)                                                             \
  extern "C" __global__ void __launch_bounds__(256) sample_spread_p##PER##_##SUF(                  \
      SampleArgs a, RowSel* sel, u64* cand, u32 t, u32 bpr, int ib, int tb) {                      \
    dependent_launch_entry();                                                                      \
    sample_spread_body<PER>(a, sel, cand, t, bpr, ib, tb, dense_key<T>(a));                        \
  }
#define SAMPLE_SPREAD(SUF, T)   \
  SAMPLE_SPREAD_PER(SUF, T, 1)  \
  SAMPLE_SPREAD_PER(SUF, T, 2)  \
  SAMPLE_SPREAD_PER(SUF, T, 4)

SAMPLE_SPREAD(f32, float)
SAMPLE_SPREAD(f16, __half)
SAMPLE_SPREAD(bf16, __nv_bfloat16)

SAMPLE_SELECT(f32, float)
SAMPLE_SELECT(f16, __half)
SAMPLE_SELECT(bf16, __nv_bfloat16)

extern "C" __global__ void sample_f32(SampleArgs a) {
  dependent_launch_entry();
  sample_body(a, dense_key<float>(a));
}
extern "C" __global__ void sample_f16(SampleArgs a) {
  dependent_launch_entry();
  sample_body(a, dense_key<__half>(a));
}
extern "C" __global__ void sample_bf16(SampleArgs a) {
  dependent_launch_entry();
  sample_body(a, dense_key<__nv_bfloat16>(a));
}
