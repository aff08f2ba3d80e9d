// Layer norm over the last dimension, one warp per row: y = (x - mean) / sqrt(var + eps) * w + b,
// statistics in f32 with the mean subtracted before squaring (two passes over a row that stays
// in L1). x, y: [rows, d] contiguous; w, b: [d].
#include "convert.cuh"

namespace {

template <typename T>
__device__ __forceinline__ void layer_norm(const T* __restrict__ x, const T* __restrict__ w,
                                           const T* __restrict__ b, T* __restrict__ y, int rows,
                                           int d, float eps) {
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
    for (int i = lane; i < d; i += 32)
        yr[i] = from_f<T>((to_f(xr[i]) - mean) * rstd * to_f(w[i]) + to_f(b[i]));
}

}  // namespace

// grid ceil(rows / 8), block 256 (8 warps, one row each).
extern "C" __global__ void layer_norm_f32(const float* x, const float* w, const float* b, float* y,
                                          int rows, int d, float eps) {
    layer_norm<float>(x, w, b, y, rows, d, eps);
}
extern "C" __global__ void layer_norm_bf16(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                           const __nv_bfloat16* b, __nv_bfloat16* y, int rows,
                                           int d, float eps) {
    layer_norm<__nv_bfloat16>(x, w, b, y, rows, d, eps);
}
extern "C" __global__ void layer_norm_f16(const __half* x, const __half* w, const __half* b,
                                          __half* y, int rows, int d, float eps) {
    layer_norm<__half>(x, w, b, y, rows, d, eps);
}

// ---- Training: forward with per-row statistics, and the backward ----
//
// One block per row (forward) or per chunk of consecutive rows (backward); thread t owns the
// columns t + k * blockDim.x, k < CPT, and keeps them in registers, so each row is read from
// memory once. blockDim.x = ceil(d / CPT) rounded up to a warp, at most 512 (d <= 512 * CPT).

namespace {

// Sums N values over the block; every thread gets the totals. Warps are added in a fixed order,
// so the result does not depend on scheduling. `red` holds 16 * N floats.
template <int N>
__device__ __forceinline__ void block_sum(float (&v)[N], float* red) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = warp_sum(v[i]);
    if (lane == 0) {
#pragma unroll
        for (int i = 0; i < N; ++i) red[warp * N + i] = v[i];
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < N; ++i) {
        float s = 0.f;
        for (int w = 0; w < warps; ++w) s += red[w * N + i];
        v[i] = s;
    }
    __syncthreads();  // `red` is reused by the next call
}

// y as in `layer_norm`, plus mean[row] and rstd[row] = 1 / sqrt(var + eps) for the backward.
template <typename T, int CPT>
__device__ __forceinline__ void layer_norm_stats(const T* __restrict__ x, const T* __restrict__ w,
                                                 const T* __restrict__ b, T* __restrict__ y,
                                                 float* __restrict__ mean_out,
                                                 float* __restrict__ rstd_out, int d, float eps) {
    __shared__ float red[16];
    const size_t row = blockIdx.x;
    const T* xr = x + row * d;
    T* yr = y + row * d;
    float v[CPT];
    float s[1] = {0.f};
#pragma unroll
    for (int k = 0; k < CPT; ++k) {
        const int j = threadIdx.x + k * blockDim.x;
        v[k] = j < d ? to_f(xr[j]) : 0.f;
        s[0] += v[k];
    }
    block_sum<1>(s, red);
    const float mean = s[0] / d;
    float q[1] = {0.f};
#pragma unroll
    for (int k = 0; k < CPT; ++k) {
        const int j = threadIdx.x + k * blockDim.x;
        const float c = j < d ? v[k] - mean : 0.f;
        q[0] += c * c;
    }
    block_sum<1>(q, red);
    const float rstd = rsqrtf(q[0] / d + eps);
#pragma unroll
    for (int k = 0; k < CPT; ++k) {
        const int j = threadIdx.x + k * blockDim.x;
        if (j < d) yr[j] = from_f<T>((v[k] - mean) * rstd * to_f(w[j]) + to_f(b[j]));
    }
    if (threadIdx.x == 0) {
        mean_out[row] = mean;
        rstd_out[row] = rstd;
    }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w, xhat = (x - mean) * rstd, for
// the rows [blockIdx.x * rows_per_block, +rows_per_block); the block's column sums of dy * xhat
// (dweight) and dy (dbias) go to partial[0][blockIdx.x][:] and partial[1][blockIdx.x][:].
template <typename T, int CPT>
__device__ __forceinline__ void layer_norm_bwd(const T* __restrict__ x, const T* __restrict__ w,
                                               const T* __restrict__ dy,
                                               const float* __restrict__ mean,
                                               const float* __restrict__ rstd, T* __restrict__ dx,
                                               float* __restrict__ partial, int rows, int d,
                                               int rows_per_block) {
    __shared__ float red[32];
    const int first = blockIdx.x * rows_per_block;
    const int last = min(rows, first + rows_per_block);
    float wv[CPT], dw[CPT], db[CPT];
#pragma unroll
    for (int k = 0; k < CPT; ++k) {
        const int j = threadIdx.x + k * blockDim.x;
        wv[k] = j < d ? to_f(w[j]) : 0.f;
        dw[k] = 0.f;
        db[k] = 0.f;
    }
    for (int row = first; row < last; ++row) {
        const size_t base = (size_t)row * d;
        const float mu = mean[row], rs = rstd[row];
        float xh[CPT], g[CPT];
        float s[2] = {0.f, 0.f};
#pragma unroll
        for (int k = 0; k < CPT; ++k) {
            const int j = threadIdx.x + k * blockDim.x;
            float dyv = 0.f;
            xh[k] = 0.f;
            if (j < d) {
                dyv = to_f(dy[base + j]);
                xh[k] = (to_f(x[base + j]) - mu) * rs;
            }
            g[k] = dyv * wv[k];
            db[k] += dyv;
            dw[k] += dyv * xh[k];
            s[0] += g[k];
            s[1] += g[k] * xh[k];
        }
        block_sum<2>(s, red);
        const float mg = s[0] / d, mgx = s[1] / d;
#pragma unroll
        for (int k = 0; k < CPT; ++k) {
            const int j = threadIdx.x + k * blockDim.x;
            if (j < d) dx[base + j] = from_f<T>(rs * (g[k] - mg - xh[k] * mgx));
        }
    }
    float* pw = partial + (size_t)blockIdx.x * d;
    float* pb = partial + ((size_t)gridDim.x + blockIdx.x) * d;
#pragma unroll
    for (int k = 0; k < CPT; ++k) {
        const int j = threadIdx.x + k * blockDim.x;
        if (j < d) {
            pw[j] = dw[k];
            pb[j] = db[k];
        }
    }
}

// out[c] = sum over the `groups` partial rows of column c, in a fixed order: thread (tx, ty) adds
// the groups ty, ty + 8, ... of column 32 * blockIdx.x + tx, then the 8 sums are added in order.
// blockIdx.y picks dweight (0) or dbias (1).
template <typename T>
__device__ __forceinline__ void layer_norm_bwd_reduce(const float* __restrict__ partial,
                                                      T* __restrict__ dw, T* __restrict__ db,
                                                      int groups, int d) {
    __shared__ float sums[8][33];
    const int col = blockIdx.x * 32 + threadIdx.x;
    const float* p = partial + (size_t)blockIdx.y * groups * d;
    float acc = 0.f;
    if (col < d)
        for (int g = threadIdx.y; g < groups; g += 8) acc += p[(size_t)g * d + col];
    sums[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && col < d) {
        float t = 0.f;
#pragma unroll
        for (int i = 0; i < 8; ++i) t += sums[i][threadIdx.x];
        (blockIdx.y == 0 ? dw : db)[col] = from_f<T>(t);
    }
}

}  // namespace

// layer_norm_stats_<dtype>_<CPT>: grid rows, block ceil(d / CPT) rounded up to 32.
// layer_norm_bwd_<dtype>_<CPT>: grid ceil(rows / rows_per_block), same block.
// layer_norm_bwd_reduce_<dtype>: grid (ceil(d / 32), 2), block (32, 8).
#define LAYER_NORM_TRAIN(T, NAME, CPT)                                                             \
    extern "C" __global__ void __launch_bounds__(512) layer_norm_stats_##NAME##_##CPT(             \
        const T* x, const T* w, const T* b, T* y, float* mean, float* rstd, int d, float eps) {    \
        layer_norm_stats<T, CPT>(x, w, b, y, mean, rstd, d, eps);                                  \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(512) layer_norm_bwd_##NAME##_##CPT(               \
        const T* x, const T* w, const T* dy, const float* mean, const float* rstd, T* dx,          \
        float* partial, int rows, int d, int rows_per_block) {                                     \
        layer_norm_bwd<T, CPT>(x, w, dy, mean, rstd, dx, partial, rows, d, rows_per_block);        \
    }

#define LAYER_NORM_TRAIN_DTYPE(T, NAME)                                                            \
    LAYER_NORM_TRAIN(T, NAME, 4)                                                                   \
    LAYER_NORM_TRAIN(T, NAME, 8)                                                                   \
    LAYER_NORM_TRAIN(T, NAME, 16)                                                                  \
    extern "C" __global__ void layer_norm_bwd_reduce_##NAME(const float* partial, T* dw, T* db,    \
                                                            int groups, int d) {                   \
        layer_norm_bwd_reduce<T>(partial, dw, db, groups, d);                                      \
    }

LAYER_NORM_TRAIN_DTYPE(float, f32)
LAYER_NORM_TRAIN_DTYPE(__nv_bfloat16, bf16)
LAYER_NORM_TRAIN_DTYPE(__half, f16)
