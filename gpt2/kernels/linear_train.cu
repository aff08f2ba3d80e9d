// Elementwise and reduction kernels of the differentiable linear layer (ops/linear_train.rs):
// GELU (tanh form) of the pre-activation when cuBLASLt cannot store it in the GEMM's epilogue,
// dZ = dY * gelu'(Z), and the bias gradient as deterministic column sums (fixed-order partial
// sums per row chunk, then one fixed-order pass over the chunks; no atomics).
// All matrices are row-major [rows, cols] and contiguous.
#include "convert.cuh"

namespace {

constexpr float SQRT_2_OVER_PI = 0.7978845608028654f;
constexpr float GELU_A = 0.044715f;

__device__ __forceinline__ float gelu(float z) {
    return 0.5f * z * (1.f + tanhf(SQRT_2_OVER_PI * (z + GELU_A * z * z * z)));
}

__device__ __forceinline__ float gelu_grad(float z) {
    const float t = tanhf(SQRT_2_OVER_PI * (z + GELU_A * z * z * z));
    return 0.5f * (1.f + t) +
           0.5f * z * (1.f - t * t) * SQRT_2_OVER_PI * (1.f + 3.f * GELU_A * z * z);
}

template <typename T>
__device__ __forceinline__ void gelu_forward(const T* __restrict__ z, T* __restrict__ y,
                                             size_t len) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < len;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = from_f<T>(gelu(to_f(z[i])));
}

// Block (32, 8): 32 adjacent columns, 8 row lanes over a chunk of ROWS_PER_CHUNK rows. With
// `z` set, also writes dz = dy * gelu'(z) and sums the rounded dz; otherwise sums dy.
// partial[chunk][col] (f32) = the chunk's column sum, in a fixed order.
constexpr int ROWS_PER_CHUNK = 64;

template <typename T>
__device__ __forceinline__ void column_partials(const T* __restrict__ dy, const T* __restrict__ z,
                                                T* __restrict__ dz, float* __restrict__ partial,
                                                int rows, int cols) {
    __shared__ float lanes[8][33];
    const int col = blockIdx.x * 32 + threadIdx.x;
    const int row0 = blockIdx.y * ROWS_PER_CHUNK;
    const int row_end = min(row0 + ROWS_PER_CHUNK, rows);
    float acc = 0.f;
    if (col < cols) {
        for (int r = row0 + threadIdx.y; r < row_end; r += 8) {
            const size_t i = (size_t)r * cols + col;
            if (z != nullptr) {
                const T g = from_f<T>(to_f(dy[i]) * gelu_grad(to_f(z[i])));
                dz[i] = g;
                acc += to_f(g);
            } else {
                acc += to_f(dy[i]);
            }
        }
    }
    lanes[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && col < cols) {
        float s = 0.f;
#pragma unroll
        for (int l = 0; l < 8; ++l) s += lanes[l][threadIdx.x];
        partial[(size_t)blockIdx.y * cols + col] = s;
    }
}

template <typename T>
__device__ __forceinline__ void sum_partials(const float* __restrict__ partial, T* __restrict__ out,
                                             int chunks, int cols) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= cols) return;
    float s = 0.f;
    for (int c = 0; c < chunks; ++c) s += partial[(size_t)c * cols + col];
    out[col] = from_f<T>(s);
}

}  // namespace

#define LINEAR_TRAIN_KERNELS(T, SUFFIX)                                                            \
    extern "C" __global__ void gelu_forward_##SUFFIX(const T* z, T* y, size_t len) {               \
        gelu_forward<T>(z, y, len);                                                                \
    }                                                                                              \
    extern "C" __global__ void column_partials_##SUFFIX(const T* dy, const T* z, T* dz,            \
                                                        float* partial, int rows, int cols) {      \
        column_partials<T>(dy, z, dz, partial, rows, cols);                                        \
    }                                                                                              \
    extern "C" __global__ void sum_partials_##SUFFIX(const float* partial, T* out, int chunks,     \
                                                     int cols) {                                   \
        sum_partials<T>(partial, out, chunks, cols);                                               \
    }

LINEAR_TRAIN_KERNELS(float, f32)
LINEAR_TRAIN_KERNELS(__nv_bfloat16, bf16)
LINEAR_TRAIN_KERNELS(__half, f16)
