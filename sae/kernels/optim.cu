// The optimizer's two passes over the parameters (the gradients' statistics, then Adam with the decoder's
// projection and renormalization), each one launch over all of them; and the fixed-order reductions of
// the aux-k loss's normalizer.
#include <cuda_bf16.h>
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

// The optimizer's multi-tensor passes over every parameter of the model in one launch each. The table
// lists the parameters; each gets a contiguous range of blocks. A parameter with `d > 0` is the decoder
// [len / d, d]: one block per row, its gradient projected off the row (g - (g . w) w) and the row
// renormalized after Adam. The others are flat, ADAM_CHUNK elements per block.
#define ADAM_MAX_PARAMS 4
#define ADAM_CHUNK 2048

struct AdamParam {
  float* p;
  const float* g;
  void* m;  // f32 or bf16, as the kernel's instantiation says
  void* v;
  int64_t len;
  int64_t d;            // > 0: the decoder, row-wise with projection and renormalization
  int64_t first_block;  // this parameter's blocks are [first_block, next parameter's first_block)
};

struct AdamTable {
  AdamParam t[ADAM_MAX_PARAMS];
  int64_t count;
  int64_t blocks;   // total
  float* dots;      // [decoder rows]: g . w of each decoder row (written by the stats pass)
  float* partial;   // [blocks]: each block's sum of squares of its (projected) gradient
  float scale;      // gradient clipping factor
  float beta1, beta2, bc1, bc2, eps, lr;
};

namespace {
// The parameter that block b belongs to.
__device__ __forceinline__ int param_of(const AdamTable& a, int64_t b) {
  int i = 0;
  while (i + 1 < a.count && b >= a.t[i + 1].first_block) ++i;
  return i;
}

__device__ __forceinline__ float load_moment(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load_moment(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void store_moment(float* p, int64_t i, float x) { p[i] = x; }
__device__ __forceinline__ void store_moment(__nv_bfloat16* p, int64_t i, float x) { p[i] = __float2bfloat16(x); }

// One Adam update of element i (moments computed in f32 whatever their storage), in the operation
// order of the host path; returns the new parameter.
template <typename M>
__device__ __forceinline__ float adam_elem(const AdamTable& a, float* p, M* m, M* v, int64_t i, float gp) {
  const float g = gp * a.scale;
  const float mi = load_moment(m, i) * a.beta1 + g * (1.f - a.beta1);
  const float vi = load_moment(v, i) * a.beta2 + (g * g) * (1.f - a.beta2);
  store_moment(m, i, mi);
  store_moment(v, i, vi);
  const float denom = sqrtf(vi / a.bc2) + a.eps;
  const float pi = p[i] - ((mi / a.bc1) / denom) * a.lr;
  p[i] = pi;
  return pi;
}
}  // namespace

// The gradients' statistics before Adam, one read of each: per decoder row its dot with the row
// (dots[row]) and the squared norm of the projected row; for the flat parameters the squared norm of each
// block's chunk. partial[block] gets the block's sum of squares.
extern "C" __global__ void sae_adam_stats(const AdamTable a) {
  const int64_t b = blockIdx.x;
  const AdamParam& t = a.t[param_of(a, b)];
  const int64_t local = b - t.first_block;
  float sq = 0.f;
  if (t.d > 0) {
    const float* gr = t.g + local * t.d;
    const float* wr = t.p + local * t.d;
    float dot = 0.f;
    for (int64_t c = threadIdx.x; c < t.d; c += blockDim.x) dot = fmaf(gr[c], wr[c], dot);
    dot = block_sum(dot);
    for (int64_t c = threadIdx.x; c < t.d; c += blockDim.x) {
      const float v = gr[c] - dot * wr[c];
      sq = fmaf(v, v, sq);
    }
    if (threadIdx.x == 0) a.dots[local] = dot;
  } else {
    const int64_t lo = local * ADAM_CHUNK;
    const int64_t hi = lo + ADAM_CHUNK < t.len ? lo + ADAM_CHUNK : t.len;
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) sq = fmaf(t.g[i], t.g[i], sq);
  }
  sq = block_sum(sq);
  if (threadIdx.x == 0) a.partial[b] = sq;
}

// total[0] = the sum of partial[0 .. count) in a fixed order (one block; f64 accumulation).
extern "C" __global__ void sae_sum_partials(const float* partial, int64_t count, double* total) {
  __shared__ double part[1024];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) acc += (double)partial[i];
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) total[0] = part[0];
}

// Adam over every parameter of the table in place, reading p, g, m, v once and writing p, m, v; the
// decoder's gradient is projected off its row on the fly (with the stats pass's dot) and each decoder
// row is rescaled to unit norm (clamped at 1e-12) right after its update, while it is in cache.
template <typename M>
__device__ void adam_multi(const AdamTable& a) {
  const int64_t b = blockIdx.x;
  const AdamParam& t = a.t[param_of(a, b)];
  const int64_t local = b - t.first_block;
  M* m = static_cast<M*>(t.m);
  M* v = static_cast<M*>(t.v);
  if (t.d > 0) {
    const int64_t base = local * t.d;
    const float dot = a.dots[local];
    float sq = 0.f;
    for (int64_t c = threadIdx.x; c < t.d; c += blockDim.x) {
      const int64_t i = base + c;
      const float gp = t.g[i] - dot * t.p[i];
      const float pi = adam_elem(a, t.p, m, v, i, gp);
      sq = fmaf(pi, pi, sq);
    }
    const float norm = fmaxf(sqrtf(block_sum(sq)), 1e-12f);
    // Each thread rescales the elements it wrote.
    for (int64_t c = threadIdx.x; c < t.d; c += blockDim.x) t.p[base + c] = t.p[base + c] / norm;
  } else {
    const int64_t lo = local * ADAM_CHUNK;
    const int64_t hi = lo + ADAM_CHUNK < t.len ? lo + ADAM_CHUNK : t.len;
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) adam_elem(a, t.p, m, v, i, t.g[i]);
  }
}

extern "C" __global__ void sae_adam_multi_f32(const AdamTable a) { adam_multi<float>(a); }
extern "C" __global__ void sae_adam_multi_bf16(const AdamTable a) { adam_multi<__nv_bfloat16>(a); }

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
