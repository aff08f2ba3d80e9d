// Fused causal self-attention forward for GPT-2 (FlashAttention-style: tiles of K/V in shared
// memory, online softmax, the score matrix never leaves the chip).
//
// qkv:  [B, T, 3, H, HD] (the c_attn output as it comes from the GEMM: per token, all query
//       heads, then all key heads, then all value heads), contiguous, 16-byte aligned.
// out:  [B, T, H, HD], ready for c_proj.
// scale_log2 = log2(e) / sqrt(HD): scores are kept in base 2 so the softmax uses exp2f.
//
// attn_mma_*: bf16/f16, tensor cores (mma.sync m16n8k16, f32 accumulation), 4 warps x 16 query
// rows per block, 64-key tiles. attn_scalar_*: one thread per query row, f32 arithmetic, for f32
// (and as a plain reference path for the half types). Both need HD = 64 (every GPT-2 size).
#include "convert.cuh"
#include <stdint.h>

namespace {

constexpr int HD = 64;
constexpr int BQ = 64;         // query rows per block
constexpr int BK = 64;         // keys per tile
// shared-memory row length in elements (padding against bank conflicts)
constexpr int LDS = HD + 8;

// Two floats packed as two 16-bit values, the first in the low half (the lower column index).
template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}
template <> __device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}

// c += a * b for one 16x8x16 tile (row-major A, column-major B, f32 accumulators).
template <typename T>
__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], const uint32_t b[2]);
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float c[4], const uint32_t a[4],
                                                        const uint32_t b[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <>
__device__ __forceinline__ void mma16816<__half>(float c[4], const uint32_t a[4],
                                                 const uint32_t b[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ uint32_t ld32(const void* p) {
    return *reinterpret_cast<const uint32_t*>(p);
}

// Rows r0..r0+BK of one head's q, k or v (row stride `stride` elements) into shared memory,
// zeros past the sequence end. 16-byte loads, all 128 threads.
template <typename T>
__device__ __forceinline__ void load_tile(T* dst, const T* src, int r0, int t_len, size_t stride) {
    constexpr int VEC = 16 / sizeof(T);
    for (int i = threadIdx.x; i < BK * (HD / VEC); i += blockDim.x) {
        const int r = i / (HD / VEC), c = (i % (HD / VEC)) * VEC;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (r0 + r < t_len)
            v = *reinterpret_cast<const uint4*>(src + (size_t)(r0 + r) * stride + c);
        *reinterpret_cast<uint4*>(dst + r * LDS + c) = v;
    }
}

template <typename T>
__device__ __forceinline__ void attn_mma(const T* __restrict__ qkv, T* __restrict__ out, int t_len,
                                         int n_head, float scale_log2) {
    __shared__ __align__(16) T sk[BK * LDS];
    __shared__ __align__(16) T sv[BK * LDS];
    const int qt = gridDim.x - 1 - blockIdx.x;  // longest rows first
    const int h = blockIdx.y, b = blockIdx.z;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane >> 2, tg = lane & 3;  // mma fragment row group and column pair
    const size_t stride = (size_t)3 * n_head * HD;
    const T* qb = qkv + (size_t)b * t_len * stride + (size_t)h * HD;
    const T* kb = qb + (size_t)n_head * HD;
    const T* vb = kb + (size_t)n_head * HD;
    const int q0 = qt * BQ, qr = warp * 16;

    // This warp's 16 query rows as A fragments, staged through sk.
    load_tile(sk, qb, q0, t_len, stride);
    __syncthreads();
    uint32_t qa[HD / 16][4];
#pragma unroll
    for (int kc = 0; kc < HD / 16; ++kc) {
        qa[kc][0] = ld32(&sk[(qr + g) * LDS + kc * 16 + tg * 2]);
        qa[kc][1] = ld32(&sk[(qr + g + 8) * LDS + kc * 16 + tg * 2]);
        qa[kc][2] = ld32(&sk[(qr + g) * LDS + kc * 16 + 8 + tg * 2]);
        qa[kc][3] = ld32(&sk[(qr + g + 8) * LDS + kc * 16 + 8 + tg * 2]);
    }
    __syncthreads();

    float o[HD / 8][4];
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    const int row[2] = {q0 + qr + g, q0 + qr + g + 8};
    const uint16_t* sv16 = reinterpret_cast<const uint16_t*>(sv);

    for (int kt = 0; kt <= qt; ++kt) {
        const int k0 = kt * BK;
        load_tile(sk, kb, k0, t_len, stride);
        load_tile(sv, vb, k0, t_len, stride);
        __syncthreads();

        float s[BK / 8][4];
#pragma unroll
        for (int n = 0; n < BK / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
        for (int kc = 0; kc < HD / 16; ++kc) {
#pragma unroll
            for (int n = 0; n < BK / 8; ++n) {
                uint32_t kf[2];
                kf[0] = ld32(&sk[(n * 8 + g) * LDS + kc * 16 + tg * 2]);
                kf[1] = ld32(&sk[(n * 8 + g) * LDS + kc * 16 + 8 + tg * 2]);
                mma16816<T>(s[n], qa[kc], kf);
            }
        }
        const bool edge = kt == qt || k0 + BK > t_len;
#pragma unroll
        for (int n = 0; n < BK / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int key = k0 + n * 8 + tg * 2 + (e & 1);
                const bool masked = edge && (key > row[e >> 1] || key >= t_len);
                s[n][e] = masked ? -INFINITY : s[n][e] * scale_log2;
            }
        }
        // Online softmax per row (r = 0: row g, r = 1: row g + 8); a row's values are spread over
        // the four threads of a quad.
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float mx = m[r];
#pragma unroll
            for (int n = 0; n < BK / 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float base = mx == -INFINITY ? 0.f : mx;
            const float corr = exp2f(m[r] - base);
            m[r] = mx;
            float sum = 0.f;
#pragma unroll
            for (int n = 0; n < BK / 8; ++n) {
                s[n][2 * r] = exp2f(s[n][2 * r] - base);
                s[n][2 * r + 1] = exp2f(s[n][2 * r + 1] - base);
                sum += s[n][2 * r] + s[n][2 * r + 1];
            }
            l[r] = l[r] * corr + sum;
#pragma unroll
            for (int n = 0; n < HD / 8; ++n) {
                o[n][2 * r] *= corr;
                o[n][2 * r + 1] *= corr;
            }
        }
        // O += P V: the score accumulators of two adjacent 8-key tiles form one A fragment.
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            uint32_t pa[4];
            pa[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
            pa[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
            pa[2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            pa[3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
            const int key = kk * 16 + tg * 2;
#pragma unroll
            for (int n = 0; n < HD / 8; ++n) {
                const int col = n * 8 + g;
                uint32_t vf[2];
                vf[0] =
                    (uint32_t)sv16[key * LDS + col] | ((uint32_t)sv16[(key + 1) * LDS + col] << 16);
                vf[1] = (uint32_t)sv16[(key + 8) * LDS + col] |
                        ((uint32_t)sv16[(key + 9) * LDS + col] << 16);
                mma16816<T>(o[n], pa, vf);
            }
        }
        __syncthreads();
    }

#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float sum = l[r];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const float inv = 1.f / sum;
        if (row[r] < t_len) {
            T* dst = out + ((size_t)b * t_len + row[r]) * n_head * HD + (size_t)h * HD;
#pragma unroll
            for (int n = 0; n < HD / 8; ++n)
                *reinterpret_cast<uint32_t*>(dst + n * 8 + tg * 2) =
                    pack2<T>(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
        }
    }
}

constexpr int SK = 32;  // keys per tile of the scalar path

template <typename T>
__device__ __forceinline__ void attn_scalar(const T* __restrict__ qkv, T* __restrict__ out,
                                            int t_len, int n_head, float scale_log2) {
    __shared__ __align__(16) float sk[SK][HD];
    __shared__ __align__(16) float sv[SK][HD];
    const int h = blockIdx.y, b = blockIdx.z;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * blockDim.x;
    const int qi = q0 + threadIdx.x;
    const size_t stride = (size_t)3 * n_head * HD;
    const T* qb = qkv + (size_t)b * t_len * stride + (size_t)h * HD;
    const T* kb = qb + (size_t)n_head * HD;
    const T* vb = kb + (size_t)n_head * HD;

    float q[HD], o[HD];
#pragma unroll
    for (int d = 0; d < HD; ++d) {
        q[d] = qi < t_len ? to_f(qb[(size_t)qi * stride + d]) * scale_log2 : 0.f;
        o[d] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    const int last = min(q0 + (int)blockDim.x, t_len);  // keys needed by this block
    for (int k0 = 0; k0 < last; k0 += SK) {
        for (int i = threadIdx.x; i < SK * HD; i += blockDim.x) {
            const int r = i / HD, d = i % HD;
            const bool in = k0 + r < t_len;
            sk[r][d] = in ? to_f(kb[(size_t)(k0 + r) * stride + d]) : 0.f;
            sv[r][d] = in ? to_f(vb[(size_t)(k0 + r) * stride + d]) : 0.f;
        }
        __syncthreads();
        // Dimension-outer order: SK independent accumulators rather than one dependent chain of
        // HD multiply-adds per key; float4 broadcast reads of the key tile.
        float s[SK];
#pragma unroll
        for (int j = 0; j < SK; ++j) s[j] = 0.f;
#pragma unroll
        for (int d = 0; d < HD; d += 4) {
#pragma unroll
            for (int j = 0; j < SK; ++j) {
                const float4 k4 = *reinterpret_cast<const float4*>(&sk[j][d]);
                s[j] = fmaf(q[d], k4.x, s[j]);
                s[j] = fmaf(q[d + 1], k4.y, s[j]);
                s[j] = fmaf(q[d + 2], k4.z, s[j]);
                s[j] = fmaf(q[d + 3], k4.w, s[j]);
            }
        }
        float mx = m;
#pragma unroll
        for (int j = 0; j < SK; ++j) {
            const int key = k0 + j;
            s[j] = (key <= qi && key < t_len) ? s[j] : -INFINITY;
            mx = fmaxf(mx, s[j]);
        }
        const float base = mx == -INFINITY ? 0.f : mx;
        const float corr = exp2f(m - base);
        m = mx;
        l *= corr;
#pragma unroll
        for (int d = 0; d < HD; ++d) o[d] *= corr;
#pragma unroll
        for (int j = 0; j < SK; ++j) {
            const float p = exp2f(s[j] - base);
            l += p;
#pragma unroll
            for (int d = 0; d < HD; ++d) o[d] = fmaf(p, sv[j][d], o[d]);
        }
        __syncthreads();
    }
    if (qi < t_len) {
        const float inv = 1.f / l;
        T* dst = out + ((size_t)b * t_len + qi) * n_head * HD + (size_t)h * HD;
#pragma unroll
        for (int d = 0; d < HD; ++d) dst[d] = from_f<T>(o[d] * inv);
    }
}

}  // namespace

// grid (ceil(T / 64), H, B), block 128.
extern "C" __global__ void __launch_bounds__(128)
    attn_mma_bf16(const __nv_bfloat16* qkv, __nv_bfloat16* out, int t_len, int n_head,
                  float scale_log2) {
    attn_mma<__nv_bfloat16>(qkv, out, t_len, n_head, scale_log2);
}
extern "C" __global__ void __launch_bounds__(128)
    attn_mma_f16(const __half* qkv, __half* out, int t_len, int n_head, float scale_log2) {
    attn_mma<__half>(qkv, out, t_len, n_head, scale_log2);
}

// grid (ceil(T / 64), H, B), block 64.
extern "C" __global__ void __launch_bounds__(64)
    attn_scalar_f32(const float* qkv, float* out, int t_len, int n_head, float scale_log2) {
    attn_scalar<float>(qkv, out, t_len, n_head, scale_log2);
}
extern "C" __global__ void __launch_bounds__(64)
    attn_scalar_bf16(const __nv_bfloat16* qkv, __nv_bfloat16* out, int t_len, int n_head,
                     float scale_log2) {
    attn_scalar<__nv_bfloat16>(qkv, out, t_len, n_head, scale_log2);
}
extern "C" __global__ void __launch_bounds__(64)
    attn_scalar_f16(const __half* qkv, __half* out, int t_len, int n_head, float scale_log2) {
    attn_scalar<__half>(qkv, out, t_len, n_head, scale_log2);
}
