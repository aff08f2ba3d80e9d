// The optimizer's passes over the dense parameters, each one read of its inputs: sums of squares (for
// the global gradient norm), the decoder-gradient projection, Adam, and the decoder-row renormalization;
// and the fixed-order reductions of the aux-k loss's normalizer.
#include <cstdint>

namespace {
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ float block_sum(float v) {
  __shared__ float part[32];
  __shared__ float total;
  v = warp_sum(v);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    float p = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.f;
    p = warp_sum(p);
    if (threadIdx.x == 0) total = p;
  }
  __syncthreads();
  const float r = total;
  __syncthreads();
  return r;
}
}  // namespace

// partial[block] = sum of x[i]^2 over the block's grid-stride share (fixed grid: deterministic).
extern "C" __global__ void sae_sumsq(const float* x, int64_t len, float* partial) {
  float acc = 0.f;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += stride) acc = fmaf(x[i], x[i], acc);
  acc = block_sum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// In place per row of g [rows, d]: g -= (g . w) w; rowsq[row] = |g|^2 afterwards.
extern "C" __global__ void sae_project_rows(float* g, const float* w, float* rowsq, int64_t rows, int64_t d) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float* gr = g + r * d;
    const float* wr = w + r * d;
    float dot = 0.f;
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) dot = fmaf(gr[c], wr[c], dot);
    dot = block_sum(dot);
    float sq = 0.f;
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
      const float v = gr[c] - dot * wr[c];
      gr[c] = v;
      sq = fmaf(v, v, sq);
    }
    sq = block_sum(sq);
    if (threadIdx.x == 0) rowsq[r] = sq;
  }
}

struct AdamArgs {
  float* p;
  const float* g;
  float* m;
  float* v;
  int64_t len;
  float scale;  // gradient clipping factor
  float beta1, beta2, bc1, bc2, eps, lr;
};

// Adam in place: m, v, p updated from the scaled gradient, in the operation order of the host path.
extern "C" __global__ void sae_adam(const AdamArgs a) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.len; i += stride) {
    const float g = a.g[i] * a.scale;
    const float m = a.m[i] * a.beta1 + g * (1.f - a.beta1);
    const float v = a.v[i] * a.beta2 + (g * g) * (1.f - a.beta2);
    a.m[i] = m;
    a.v[i] = v;
    const float denom = sqrtf(v / a.bc2) + a.eps;
    a.p[i] = a.p[i] - ((m / a.bc1) / denom) * a.lr;
  }
}

// In place: every row of w [rows, d] scaled to unit norm (norm clamped at 1e-12).
extern "C" __global__ void sae_renorm_rows(float* w, int64_t rows, int64_t d) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float* wr = w + r * d;
    float sq = 0.f;
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) sq = fmaf(wr[c], wr[c], sq);
    const float norm = fmaxf(sqrtf(block_sum(sq)), 1e-12f);
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) wr[c] = wr[c] / norm;
  }
}

// The aux-k loss's residual and its spread, in fixed-order reductions: e = x - r over [rows, d], and
// partial[chunk * d + col] = the sum of e's column col over the rows of the chunk (one thread per column
// and chunk: coalesced across the columns).
extern "C" __global__ void sae_residual_cols(const float* x, const float* r, float* e, float* partial,
                                             int64_t rows, int64_t d, int64_t chunk) {
  const int64_t col = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= d) return;
  const int64_t lo = (int64_t)blockIdx.y * chunk;
  const int64_t hi = lo + chunk < rows ? lo + chunk : rows;
  float acc = 0.f;
  for (int64_t row = lo; row < hi; ++row) {
    const int64_t i = row * d + col;
    const float v = x[i] - r[i];
    e[i] = v;
    acc += v;
  }
  partial[blockIdx.y * d + col] = acc;
}

// mean[col] = the sum of the chunks' partial sums of column col, over rows.
extern "C" __global__ void sae_col_mean(const float* partial, float* mean, int64_t chunks, int64_t rows, int64_t d) {
  const int64_t col = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= d) return;
  float acc = 0.f;
  for (int64_t c = 0; c < chunks; ++c) acc += partial[c * d + col];
  mean[col] = acc / (float)rows;
}

// partial[block] = sum of (e[i] - mean[col(i)])^2 over the block's grid-stride share of e [len / d, d].
extern "C" __global__ void sae_centered_sumsq(const float* e, const float* mean, int64_t len, int64_t d,
                                             float* partial) {
  float acc = 0.f;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += stride) {
    const float v = e[i] - mean[i % d];
    acc = fmaf(v, v, acc);
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}
