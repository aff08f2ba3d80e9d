// Layer norm over the last dimension, one warp per row: y = (x - mean) / sqrt(var + eps) * w + b,
// statistics in f32 with the mean subtracted before squaring (two passes over a row that stays
// in L1). x, y: [rows, d] contiguous; w, b: [d].
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace {

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <typename T>
__device__ __forceinline__ void layer_norm(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                                           T* __restrict__ y, int rows, int d, float eps) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const T* xr = x + (size_t)row * d;
    T* yr = y + (size_t)row * d;
    float sum = 0.f;
    for (int i = lane; i < d; i += 32) sum += to_f(xr[i]);
    const float mean = warp_sum(sum) / d;
    float sq = 0.f;
    for (int i = lane; i < d; i += 32) {
        const float c = to_f(xr[i]) - mean;
        sq += c * c;
    }
    const float rstd = rsqrtf(warp_sum(sq) / d + eps);
    for (int i = lane; i < d; i += 32) yr[i] = from_f<T>((to_f(xr[i]) - mean) * rstd * to_f(w[i]) + to_f(b[i]));
}

}  // namespace

// grid ceil(rows / 8), block 256 (8 warps, one row each).
extern "C" __global__ void layer_norm_f32(const float* x, const float* w, const float* b, float* y, int rows, int d,
                                          float eps) {
    layer_norm<float>(x, w, b, y, rows, d, eps);
}
extern "C" __global__ void layer_norm_bf16(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* b,
                                           __nv_bfloat16* y, int rows, int d, float eps) {
    layer_norm<__nv_bfloat16>(x, w, b, y, rows, d, eps);
}
extern "C" __global__ void layer_norm_f16(const __half* x, const __half* w, const __half* b, __half* y, int rows, int d,
                                          float eps) {
    layer_norm<__half>(x, w, b, y, rows, d, eps);
}
