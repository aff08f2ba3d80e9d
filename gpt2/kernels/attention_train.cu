// Row kernels of the differentiable causal attention; the GEMMs around them are cuBLAS calls.
// Scores live in a [B * H * T, T] buffer, one row per (batch, head, query i); the query sees keys
// 0..=i. One warp per row; rows whose length is a multiple of 4 go through float4 loads. Sums are
// warp butterflies in a fixed order, so a run is bit-reproducible.
#include <math.h>

#include "convert.cuh"

namespace {

constexpr unsigned FULL = 0xffffffffu;

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL, v, o));
    return v;
}

// Elements [4q, 4q + 4) of a row, or element q alone when V4 is false.
template <bool V4> struct Chunk {
    static constexpr int N = V4 ? 4 : 1;
    float e[N];
    __device__ __forceinline__ void load(const float* row, int q) {
        if constexpr (V4) {
            float4 x = reinterpret_cast<const float4*>(row)[q];
            e[0] = x.x; e[1] = x.y; e[2] = x.z; e[3] = x.w;
        } else {
            e[0] = row[q];
        }
    }
    __device__ __forceinline__ void store(float* row, int q) const {
        if constexpr (V4) {
            reinterpret_cast<float4*>(row)[q] = make_float4(e[0], e[1], e[2], e[3]);
        } else {
            row[q] = e[0];
        }
    }
};

// In place: row[j] = softmax(row[0..n))[j] for j < n, 0 for n <= j < t (scores already scaled).
template <bool V4> __device__ void softmax_row(float* row, int t, int n, int lane) {
    using C = Chunk<V4>;
    const int chunks_seen = (n + C::N - 1) / C::N, chunks = t / C::N;
    float m = -INFINITY;
    for (int q = lane; q < chunks_seen; q += 32) {
        C c; c.load(row, q);
#pragma unroll
        for (int l = 0; l < C::N; ++l)
            if (q * C::N + l < n) m = fmaxf(m, c.e[l]);
    }
    m = warp_max(m);
    float s = 0.f;
    for (int q = lane; q < chunks_seen; q += 32) {
        C c; c.load(row, q);
#pragma unroll
        for (int l = 0; l < C::N; ++l)
            if (q * C::N + l < n) s += expf(c.e[l] - m);
    }
    const float inv = 1.f / warp_sum(s);
    for (int q = lane; q < chunks; q += 32) {
        C c;
        if (q < chunks_seen) c.load(row, q);
#pragma unroll
        for (int l = 0; l < C::N; ++l)
            c.e[l] = q * C::N + l < n ? expf(c.e[l] - m) * inv : 0.f;
        c.store(row, q);
    }
}

// In place on dp: dS[j] = P[j] (dP[j] - sum_k P[k] dP[k]) for j < n, 0 for n <= j < t.
template <bool V4>
__device__ void softmax_bwd_row(const float* p, float* dp, int t, int n, int lane) {
    using C = Chunk<V4>;
    const int chunks_seen = (n + C::N - 1) / C::N, chunks = t / C::N;
    float s = 0.f;
    for (int q = lane; q < chunks_seen; q += 32) {
        C a, g; a.load(p, q); g.load(dp, q);
#pragma unroll
        for (int l = 0; l < C::N; ++l)
            if (q * C::N + l < n) s += a.e[l] * g.e[l];
    }
    const float rowsum = warp_sum(s);
    for (int q = lane; q < chunks; q += 32) {
        C a, g;
        if (q < chunks_seen) { a.load(p, q); g.load(dp, q); }
#pragma unroll
        for (int l = 0; l < C::N; ++l)
            g.e[l] = q * C::N + l < n ? a.e[l] * (g.e[l] - rowsum) : 0.f;
        g.store(dp, q);
    }
}

}  // namespace

// Causal softmax of `rows` score rows of length t, in place; row r belongs to query r % t.
extern "C" __global__ void attn_train_softmax_f32(float* __restrict__ s, int t, long long rows) {
    const long long r = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (r >= rows) return;
    const int lane = threadIdx.x & 31, n = (int)(r % t) + 1;
    float* row = s + r * (long long)t;
    if ((t & 3) == 0) softmax_row<true>(row, t, n, lane);
    else softmax_row<false>(row, t, n, lane);
}

// dS = P ⊙ (dP − rowsum(dP ⊙ P)) of `rows` rows of length t, written over dP.
extern "C" __global__ void attn_train_softmax_bwd_f32(const float* __restrict__ p,
                                                      float* __restrict__ dp, int t,
                                                      long long rows) {
    const long long r = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (r >= rows) return;
    const int lane = threadIdx.x & 31, n = (int)(r % t) + 1;
    const long long at = r * (long long)t;
    if ((t & 3) == 0) softmax_bwd_row<true>(p + at, dp + at, t, n, lane);
    else softmax_bwd_row<false>(p + at, dp + at, t, n, lane);
}

// Block addresses for the pointer-array batched GEMMs: entry bi * h + hi of operand k's array is
// base[k] + bi * seq_stride[k] + hi * head_stride[k] (bytes). Arrays follow each other in `out`.
struct PointerPlan {
    unsigned long long base[12], seq_stride[12], head_stride[12];
    int operands;
};

extern "C" __global__ void attn_train_pointers(PointerPlan plan, unsigned long long* out, int b,
                                               int h) {
    const long long blocks = (long long)b * h, n = plan.operands * blocks;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const int k = (int)(i / blocks), r = (int)(i % blocks);
        out[i] = plan.base[k] + (unsigned long long)(r / h) * plan.seq_stride[k] +
                 (unsigned long long)(r % h) * plan.head_stride[k];
    }
}
