// Kernels of the sparse SAE step over S selected (row, latent) pairs given as flat indices
// `row * n + col` (int64, ascending where stated): decode from the pairs, dot products per pair, weight
// gradients grouped by latent (over a stable sort of the pairs by latent, so that every sum runs in a
// fixed order and a run is bit-reproducible), and the in-place passes over the dense pre-activations.
#include <cuda_bf16.h>
#include <cstdint>

namespace {
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// First position in the ascending `a[0..len)` whose value is >= key.
template <typename T>
__device__ __forceinline__ int64_t lower_bound(const T* a, int64_t len, T key) {
  int64_t lo = 0, hi = len;
  while (lo < hi) {
    const int64_t mid = (lo + hi) >> 1;
    if (a[mid] < key) lo = mid + 1; else hi = mid;
  }
  return lo;
}

__device__ __forceinline__ float load(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void store(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16(v); }
}  // namespace

// out[b] = sum over the pairs of row b (ascending idx, so a contiguous run) of vals[s] * w[col(s)].
// One block per output row; pairs are summed in index order.
extern "C" __global__ void sae_decode_rows(const float* vals, const int64_t* idx, const float* w, float* out,
                                           int64_t pairs, int64_t rows, int64_t n, int64_t d) {
  for (int64_t b = blockIdx.x; b < rows; b += gridDim.x) {
    const int64_t lo = lower_bound(idx, pairs, b * n);
    const int64_t hi = lower_bound(idx, pairs, (b + 1) * n);
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
      float acc = 0.f;
      for (int64_t s = lo; s < hi; ++s) acc = fmaf(vals[s], w[(idx[s] - b * n) * d + c], acc);
      out[b * d + c] = acc;
    }
  }
}

// Matryoshka's nested prefixes from the pairs: the latents are cut at ends[0] < ... < ends[groups - 1] = n,
// and since a row's pairs come in ascending latent order, the pairs of every prefix are a leading run of
// them. errors[(g * rows + b) * d + c] = x[b, c] - (sum over the pairs of row b with col < ends[g] of
// vals[s] * w[col(s), c] + b_dec[c]): one running sum per column (the same pair-order sum as
// sae_decode_rows), its residual written at every prefix end, also where no pair falls in the group.
// rebased[s] = idx[s] + group(s) * rows * n: the pair's flat index in the [groups * rows, n] layout
// whose row g * rows + b holds the gradient reaching row b's pairs of group g. One block per row.
extern "C" __global__ void sae_prefix_errors(const float* x, const float* vals, const int64_t* idx, const float* w,
                                             const float* b_dec, const int64_t* ends, float* errors,
                                             int64_t* rebased, int64_t pairs, int64_t rows, int64_t n, int64_t d,
                                             int64_t groups) {
  for (int64_t b = blockIdx.x; b < rows; b += gridDim.x) {
    const int64_t lo = lower_bound(idx, pairs, b * n);
    const int64_t hi = lower_bound(idx, pairs, (b + 1) * n);
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
      const float xv = x[b * d + c], bias = b_dec[c];
      float acc = 0.f;
      int64_t s = lo;
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t end = b * n + ends[g];
        for (; s < hi && idx[s] < end; ++s) acc = fmaf(vals[s], w[(idx[s] - b * n) * d + c], acc);
        errors[(g * rows + b) * d + c] = xv - (acc + bias);
      }
    }
    for (int64_t s = lo + threadIdx.x; s < hi; s += blockDim.x) {
      const int64_t col = idx[s] - b * n;
      int64_t g = 0;
      while (g + 1 < groups && col >= ends[g]) ++g;
      rebased[s] = idx[s] + g * rows * n;
    }
  }
}

// The gradient reaching the pairs of each group: u[g * len + i] = sum over h >= g (every prefix from g on
// holds group g's pairs) of -2 * coefs[h] * grad[0] * errors[h * len + i], summed from the last group down;
// len = rows * d. grad is the loss's upstream gradient, read on the device.
extern "C" __global__ void sae_prefix_upstream(const float* errors, const float* coefs, const float* grad, float* u,
                                               int64_t len, int64_t groups) {
  const float up = -2.f * grad[0];
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += stride) {
    float acc = 0.f;
    for (int64_t g = groups - 1; g >= 0; --g) {
      acc = fmaf(coefs[g] * up, errors[g * len + i], acc);
      u[g * len + i] = acc;
    }
  }
}

// out[s] = g[row(s)] . w[col(s)] (+ bias[col(s)] when bias is not null). One warp per pair.
extern "C" __global__ void sae_dot_pairs(const float* g, const int64_t* idx, const float* w, const float* bias,
                                         float* out, int64_t pairs, int64_t n, int64_t d) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
  for (int64_t s = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); s < pairs; s += warps) {
    const int64_t row = idx[s] / n, col = idx[s] - row * n;
    const float* gr = g + row * d;
    const float* wr = w + col * d;
    float acc = 0.f;
    for (int64_t c = lane; c < d; c += 32) acc = fmaf(gr[c], wr[c], acc);
    acc = warp_sum(acc);
    if (lane == 0) out[s] = bias != nullptr ? acc + bias[col] : acc;
  }
}

// Keys (latent) and positions of the pairs, for the stable sort by latent.
extern "C" __global__ void sae_pair_keys(const int64_t* idx, uint32_t* keys, uint32_t* pos, int64_t pairs,
                                         int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t s = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; s < pairs; s += stride) {
    keys[s] = (uint32_t)(idx[s] % n);
    pos[s] = (uint32_t)s;
  }
}

// offsets[j] = the first sorted position whose latent is >= j, for j in 0..=cols: latent j's pairs are
// offsets[j]..offsets[j + 1]. One thread per latent, so the reduction's blocks start without a search.
extern "C" __global__ void sae_latent_offsets(const uint32_t* keys, int64_t* offsets, int64_t pairs,
                                              int64_t cols) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j <= cols; j += stride) {
    offsets[j] = lower_bound(keys, pairs, (uint32_t)j);
  }
}

// out[j] (+)= sum over the pairs of latent j of vals[s] * g[row(s)], in ascending s (the sort is
// stable): `pos` the pairs sorted by latent, `offsets` from sae_latent_offsets. One block per latent;
// latents without a pair get a zero row (or keep theirs when accumulating). The block stages each tile of
// its pairs' rows and values in shared memory with all its threads, so that the per-pair loop reads only
// g, whose loads are independent and kept in flight by the unrolled loop: a latent chosen by much of the
// batch was otherwise a long chain of dependent global loads on one block.
namespace {
constexpr int COL_TILE = 256;
}
extern "C" __global__ void sae_col_reduce(const float* g, const int64_t* idx, const float* vals,
                                          const int64_t* offsets, const uint32_t* pos, float* out,
                                          int64_t cols, int64_t n, int64_t d, int accumulate) {
  __shared__ int64_t row_s[COL_TILE];
  __shared__ float val_s[COL_TILE];
  for (int64_t j = blockIdx.x; j < cols; j += gridDim.x) {
    const int64_t lo = offsets[j], hi = offsets[j + 1];
    if (accumulate && lo == hi) continue;
    for (int64_t c0 = 0; c0 < d; c0 += blockDim.x) {
      const int64_t c = c0 + threadIdx.x;
      const bool live = c < d;
      float acc = accumulate && live ? out[j * d + c] : 0.f;
      for (int64_t t0 = lo; t0 < hi; t0 += COL_TILE) {
        const int cnt = (int)min((int64_t)COL_TILE, hi - t0);
        __syncthreads();  // every thread is done with the previous tile
        for (int i = threadIdx.x; i < cnt; i += blockDim.x) {
          const uint32_t s = pos[t0 + i];
          row_s[i] = idx[s] / n * d;
          val_s[i] = vals[s];
        }
        __syncthreads();
        if (live) {
#pragma unroll 8
          for (int i = 0; i < cnt; ++i) acc = fmaf(val_s[i], g[row_s[i] + c], acc);
        }
      }
      if (live) out[j * d + c] = acc;
    }
  }
}

// fired[col(s)] = 1 for every pair with a positive value (fired is zeroed by the caller).
extern "C" __global__ void sae_mark_fired(const int64_t* idx, const float* vals, float* fired, int64_t pairs,
                                          int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t s = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; s < pairs; s += stride) {
    if (vals[s] > 0.f) fired[idx[s] % n] = 1.f;
  }
}

// In place over pre [rows, n]: pre = max(pre + bias[col], 0). Blocks tile the columns (x) and rows (y).
template <typename T>
__device__ void bias_relu(T* pre, const float* bias, int64_t rows, int64_t n) {
  const int64_t col = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= n) return;
  const float b = bias[col];
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const int64_t i = r * n + col;
    store(pre, i, fmaxf(load(pre, i) + b, 0.f));
  }
}
extern "C" __global__ void sae_bias_relu_f32(float* pre, const float* bias, int64_t rows, int64_t n) {
  bias_relu(pre, bias, rows, n);
}
extern "C" __global__ void sae_bias_relu_bf16(__nv_bfloat16* pre, const float* bias, int64_t rows, int64_t n) {
  bias_relu(pre, bias, rows, n);
}

// The dead latents of a mask, compacted on the device: cols[p] = the position of the p-th nonzero byte
// of mask [n] (ascending), p < width, and the positions from their count on repeat the first (the
// alignment padding). One block of DEAD_COLUMNS_THREADS threads walks the mask in tiles of 16 bytes per
// thread (coalesced): each thread's flags as a bit set, a block scan of their counts, then the writes.
// Requires at least one nonzero byte.
namespace {
constexpr int DEAD_COLUMNS_THREADS = 1024;
constexpr int DEAD_COLUMNS_BYTES = 16;
}
extern "C" __global__ void sae_dead_columns(const uint8_t* mask, uint32_t* cols, int64_t n, int64_t width) {
  __shared__ uint32_t warp_count[DEAD_COLUMNS_THREADS / 32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  constexpr int64_t TILE = (int64_t)DEAD_COLUMNS_THREADS * DEAD_COLUMNS_BYTES;
  uint32_t base = 0;  // dead latents before the tile (the same in every thread)
  for (int64_t t0 = 0; t0 < n; t0 += TILE) {
    const int64_t lo = t0 + (int64_t)tid * DEAD_COLUMNS_BYTES;
    uint32_t flags = 0;
#pragma unroll
    for (int q = 0; q < DEAD_COLUMNS_BYTES; ++q) {
      if (lo + q < n && mask[lo + q] != 0) flags |= 1u << q;
    }
    const uint32_t count = __popc(flags);
    uint32_t incl = count;  // inclusive scan within the warp
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t v = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += v;
    }
    if (lane == 31) warp_count[warp] = incl;
    __syncthreads();
    if (warp == 0) {
      uint32_t w = lane < DEAD_COLUMNS_THREADS / 32 ? warp_count[lane] : 0u;
      for (int o = 1; o < 32; o <<= 1) {
        const uint32_t v = __shfl_up_sync(0xffffffffu, w, o);
        if (lane >= o) w += v;
      }
      if (lane < DEAD_COLUMNS_THREADS / 32) warp_count[lane] = w;  // inclusive over the warps
    }
    __syncthreads();
    uint32_t pos = base + (warp > 0 ? warp_count[warp - 1] : 0u) + incl - count;
    for (uint32_t f = flags; f; f &= f - 1) {
      if (pos < width) cols[pos] = (uint32_t)(lo + __ffs(f) - 1);
      ++pos;
    }
    base += warp_count[DEAD_COLUMNS_THREADS / 32 - 1];
    __syncthreads();  // warp_count is rewritten by the next tile
  }
  __syncthreads();  // cols[0] is written by the thread holding the first dead latent
  for (int64_t p = (int64_t)base + tid; p < width; p += DEAD_COLUMNS_THREADS) cols[p] = cols[0];
}

// out [cols, rows] = in [rows, cols] transposed, through 32 x 32 tiles in shared memory so that reads
// and writes are both coalesced. Blocks of 256 threads (32 x 8); x tiles the columns, y the rows.
template <typename T>
__device__ void transpose(const T* in, T* out, int64_t rows, int64_t cols) {
  __shared__ float tile[32][33];
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  const int64_t c0 = (int64_t)blockIdx.x * 32;
  for (int64_t r0 = (int64_t)blockIdx.y * 32; r0 < rows; r0 += (int64_t)gridDim.y * 32) {
    for (int k = ty; k < 32; k += 8) {
      const int64_t r = r0 + k, c = c0 + tx;
      if (r < rows && c < cols) tile[k][tx] = load(in, r * cols + c);
    }
    __syncthreads();
    for (int k = ty; k < 32; k += 8) {
      const int64_t c = c0 + k, r = r0 + tx;
      if (c < cols && r < rows) store(out, c * rows + r, tile[tx][k]);
    }
    __syncthreads();
  }
}
extern "C" __global__ void sae_transpose_f32(const float* in, float* out, int64_t rows, int64_t cols) {
  transpose(in, out, rows, cols);
}
extern "C" __global__ void sae_transpose_bf16(const __nv_bfloat16* in, __nv_bfloat16* out, int64_t rows,
                                              int64_t cols) {
  transpose(in, out, rows, cols);
}

// out[p] = w[rows[p]] (rows of d), cast to out's dtype: the dead latents' weight rows. Blocks walk the
// output rows; threads the columns.
template <typename T>
__device__ void gather_rows(const float* w, const uint32_t* rows, T* out, int64_t count, int64_t d) {
  for (int64_t p = blockIdx.x; p < count; p += gridDim.x) {
    const float* src = w + (int64_t)rows[p] * d;
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) store(out, p * d + c, src[c]);
  }
}
extern "C" __global__ void sae_gather_rows_f32(const float* w, const uint32_t* rows, float* out, int64_t count,
                                               int64_t d) {
  gather_rows(w, rows, out, count, d);
}
extern "C" __global__ void sae_gather_rows_bf16(const float* w, const uint32_t* rows, __nv_bfloat16* out,
                                                int64_t count, int64_t d) {
  gather_rows(w, rows, out, count, d);
}

// In place over scores [rows, n] (non-negative): the columns of live latents become -1, below every
// dead latent's score, so that a row-wise selection of at most the dead count picks dead latents only.
template <typename T>
__device__ void mask_live(T* scores, const uint8_t* dead, int64_t rows, int64_t n) {
  const int64_t col = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= n || dead[col] != 0) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) store(scores, r * n + col, -1.f);
}
extern "C" __global__ void sae_mask_live_f32(float* scores, const uint8_t* dead, int64_t rows, int64_t n) {
  mask_live(scores, dead, rows, n);
}
extern "C" __global__ void sae_mask_live_bf16(__nv_bfloat16* scores, const uint8_t* dead, int64_t rows, int64_t n) {
  mask_live(scores, dead, rows, n);
}

// Aux-k over the dead columns only. out [rows, cols] is zeroed by the caller; `idx [rows, keep]` holds the
// selected columns of each row (each at most once), which take their score: the aux activation matrix.
// No two threads write the same element.
template <typename T>
__device__ void scatter_rows(const T* src, const int64_t* idx, T* out, int64_t pairs, int64_t keep, int64_t cols) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t s = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; s < pairs; s += stride) {
    const int64_t o = (s / keep) * cols + idx[s];
    out[o] = src[o];
  }
}
extern "C" __global__ void sae_scatter_rows_f32(const float* src, const int64_t* idx, float* out, int64_t pairs,
                                                int64_t keep, int64_t cols) {
  scatter_rows(src, idx, out, pairs, keep, cols);
}
extern "C" __global__ void sae_scatter_rows_bf16(const __nv_bfloat16* src, const int64_t* idx, __nv_bfloat16* out,
                                                 int64_t pairs, int64_t keep, int64_t cols) {
  scatter_rows(src, idx, out, pairs, keep, cols);
}

// In place over x [rows, cols]: the columns from `from` on become 0 (the alignment padding of the
// compacted dead columns).
template <typename T>
__device__ void zero_tail(T* x, int64_t rows, int64_t cols, int64_t from) {
  const int64_t pad = cols - from;
  const int64_t len = rows * pad;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += stride) {
    const int64_t r = i / pad;
    store(x, r * cols + from + (i - r * pad), 0.f);
  }
}
extern "C" __global__ void sae_zero_tail_f32(float* x, int64_t rows, int64_t cols, int64_t from) {
  zero_tail(x, rows, cols, from);
}
extern "C" __global__ void sae_zero_tail_bf16(__nv_bfloat16* x, int64_t rows, int64_t cols, int64_t from) {
  zero_tail(x, rows, cols, from);
}

// In place: y = e - y (the aux reconstruction becomes its residual).
extern "C" __global__ void sae_sub_from(float* y, const float* e, int64_t len) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += stride) y[i] = e[i] - y[i];
}

// out = s * src (times by[0] when `by` is not null: the loss's upstream gradient, read on the device),
// in out's type (the aux loss's gradient wrt its reconstruction, in the matmuls' dtype).
template <typename T>
__device__ void scale_to(const float* src, T* out, float s, const float* by, int64_t len) {
  const float f = by != nullptr ? s * by[0] : s;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += stride) store(out, i, f * src[i]);
}
extern "C" __global__ void sae_scale_to_f32(const float* src, float* out, float s, const float* by, int64_t len) {
  scale_to(src, out, s, by, len);
}
extern "C" __global__ void sae_scale_to_bf16(const float* src, __nv_bfloat16* out, float s, const float* by,
                                             int64_t len) {
  scale_to(src, out, s, by, len);
}

// In place over g [rows, width]: g = 0 wherever a <= 0 (the ReLU and the selection of the aux
// activations at once), and partial[chunk * width + col] = the sum of the masked column col over the
// rows of the chunk, in row order (one thread per column and chunk: coalesced across the columns; the
// loads of MASK_UNROLL rows are issued before they are used, so that enough reads are in flight).
namespace {
constexpr int MASK_UNROLL = 8;
}
template <typename T>
__device__ void mask_colsum(T* g, const T* a, float* partial, int64_t rows, int64_t width, int64_t chunk) {
  const int64_t col = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= width) return;
  const int64_t lo = (int64_t)blockIdx.y * chunk;
  const int64_t hi = lo + chunk < rows ? lo + chunk : rows;
  float acc = 0.f;
  int64_t r = lo;
  for (; r + MASK_UNROLL <= hi; r += MASK_UNROLL) {
    float av[MASK_UNROLL], gv[MASK_UNROLL];
#pragma unroll
    for (int u = 0; u < MASK_UNROLL; ++u) {
      av[u] = load(a, (r + u) * width + col);
      gv[u] = load(g, (r + u) * width + col);
    }
#pragma unroll
    for (int u = 0; u < MASK_UNROLL; ++u) {
      if (av[u] > 0.f) {
        acc += gv[u];
      } else {
        store(g, (r + u) * width + col, 0.f);
      }
    }
  }
  for (; r < hi; ++r) {
    const int64_t i = r * width + col;
    if (load(a, i) > 0.f) {
      acc += load(g, i);
    } else {
      store(g, i, 0.f);
    }
  }
  partial[blockIdx.y * width + col] = acc;
}
extern "C" __global__ void sae_mask_colsum_f32(float* g, const float* a, float* partial, int64_t rows,
                                               int64_t width, int64_t chunk) {
  mask_colsum(g, a, partial, rows, width, chunk);
}
extern "C" __global__ void sae_mask_colsum_bf16(__nv_bfloat16* g, const __nv_bfloat16* a, float* partial,
                                                int64_t rows, int64_t width, int64_t chunk) {
  mask_colsum(g, a, partial, rows, width, chunk);
}

// In place: acc[rows[i]] += src[i] for i < count (rows null: row i), rows of d floats. The row indices are
// distinct, so no two threads touch the same element.
extern "C" __global__ void sae_rows_add(float* acc, const uint32_t* rows, const float* src, int64_t count,
                                        int64_t d) {
  const int64_t len = count * d;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += stride) {
    const int64_t r = i / d, c = i - r * d;
    const int64_t dst = rows != nullptr ? (int64_t)rows[r] : r;
    acc[dst * d + c] += src[i];
  }
}

// The aux-k activations over the dead columns, in one pass per row: one block per row gathers
// scores[b, cols[j]] into shared memory (j < real; the alignment padding reads 0; cols null: column j),
// finds the keep-th largest by a radix select over order-preserving keys of the float bits (four 8-bit
// digits, from the top; -0 counts as +0, NaN above +inf), and writes out[b] dense: the kept scores, zeros elsewhere.
// Among the scores equal to the threshold the lowest positions are kept, as a full sort by (value
// descending, index ascending) would; no float atomics, so the result is exact and deterministic. The
// position-ordered write pass runs only where it matters: when some but not all of the scores equal to
// the threshold are kept, and the threshold is not zero (kept or not, a zero writes 0).
// Requires 1 <= keep < width <= AUX_ROW_MAX.
namespace {
// The row lives in dynamic shared memory sized to its width (more blocks per multiprocessor for narrow
// rows); at most 44 KiB of f32, with the histogram under the 48 KiB a launch gets without opting in.
constexpr int AUX_ROW_MAX = 11264;
constexpr int AUX_THREADS = 256;    // one histogram bin per thread

__device__ __forceinline__ uint32_t order_key(float v) {
  const uint32_t u = __float_as_uint(v == 0.f ? 0.f : v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

template <typename T>
__device__ void aux_topk_rows(const T* scores, const uint32_t* cols, T* out, int64_t rows, int64_t n,
                              int64_t real, int64_t width, int64_t keep) {
  extern __shared__ float row[];  // [width]
  __shared__ uint32_t hist[256];
  __shared__ uint32_t s_prefix, s_need;  // the threshold's digits so far; how many to take at or below it
  __shared__ uint32_t s_all;             // after the last digit: every score equal to the threshold is kept
  __shared__ uint32_t warp_eq[AUX_THREADS / 32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t span = (width + AUX_THREADS - 1) / AUX_THREADS * AUX_THREADS;
  for (int64_t b = blockIdx.x; b < rows; b += gridDim.x) {
    const T* src = scores + b * n;
    // Scattered 32-byte sectors (one per dead column at 5 % dead): several loads in flight per thread.
#pragma unroll 4
    for (int64_t j = tid; j < width; j += AUX_THREADS) {
      row[j] = j < real ? load(src, cols != nullptr ? (int64_t)cols[j] : j) : 0.f;
    }
    if (tid == 0) {
      s_prefix = 0;
      s_need = (uint32_t)keep;
    }
    for (int shift = 24; shift >= 0; shift -= 8) {
      hist[tid] = 0;
      __syncthreads();
      const uint32_t prefix = s_prefix;
      const uint32_t high = shift == 24 ? 0u : (0xffffffffu << (shift + 8));
      for (int64_t j = tid; j < span; j += AUX_THREADS) {
        uint32_t digit = 256;  // not counted
        if (j < width) {
          const uint32_t key = order_key(row[j]);
          if (((key ^ prefix) & high) == 0) digit = (key >> shift) & 255u;
        }
        // One shared atomic per distinct digit of the warp (the ReLU's zeros share one bin); nothing for a
        // warp whose scores all lie outside the prefix (most of them after the first digit).
        if (__any_sync(0xffffffffu, digit < 256)) {
          const uint32_t peers = __match_any_sync(0xffffffffu, digit);
          if (digit < 256 && lane == __ffs(peers) - 1) atomicAdd(&hist[digit], (uint32_t)__popc(peers));
        }
      }
      __syncthreads();
      if (warp == 0) {
        // Lane l holds bins 255 - 8l down to 248 - 8l; the first lane whose running count from the top
        // reaches `need` holds the threshold's digit.
        uint32_t c[8], sum = 0;
        for (int i = 0; i < 8; ++i) {
          c[i] = hist[255 - 8 * lane - i];
          sum += c[i];
        }
        uint32_t incl = sum;
        for (int o = 1; o < 32; o <<= 1) {
          const uint32_t v = __shfl_up_sync(0xffffffffu, incl, o);
          if (lane >= o) incl += v;
        }
        const uint32_t need = s_need;
        const uint32_t hit = __ballot_sync(0xffffffffu, incl >= need);
        if (lane == __ffs(hit) - 1) {
          uint32_t above = incl - sum;
          int i = 0;
          while (above + c[i] < need) above += c[i++];
          s_prefix = prefix | ((uint32_t)(255 - 8 * lane - i) << shift);
          s_need = need - above;
          s_all = above + c[i] == need ? 1u : 0u;
        }
      }
      __syncthreads();
    }
    const uint32_t thr = s_prefix, need = s_need;
    const bool all = s_all != 0;
    T* dst = out + b * width;
    if (all || thr == order_key(0.f)) {
      // Everything above the threshold, and every score equal to it when all of those are kept.
      for (int64_t j = tid; j < width; j += AUX_THREADS) {
        const float v = row[j];
        const uint32_t key = order_key(v);
        store(dst, j, key > thr || (all && key == thr) ? v : 0.f);
      }
      __syncthreads();  // the next row overwrites `row`
      continue;
    }
    // Everything above the threshold, and the first `need` equal to it in position order.
    uint32_t taken = 0;
    for (int64_t base = 0; base < span; base += AUX_THREADS) {
      const int64_t j = base + tid;
      const float v = j < width ? row[j] : 0.f;
      const uint32_t key = order_key(v);
      const bool eq = j < width && key == thr;
      const uint32_t ball = __ballot_sync(0xffffffffu, eq);
      if (lane == 0) warp_eq[warp] = __popc(ball);
      __syncthreads();
      uint32_t before = taken + __popc(ball & ((1u << lane) - 1u));
      uint32_t total = 0;
      for (int w = 0; w < AUX_THREADS / 32; ++w) {
        if (w < warp) before += warp_eq[w];
        total += warp_eq[w];
      }
      if (j < width) store(dst, j, key > thr || (eq && before < need) ? v : 0.f);
      taken += total;
      __syncthreads();
    }
  }
}
}  // namespace

extern "C" __global__ void sae_aux_topk_rows_f32(const float* scores, const uint32_t* cols, float* out,
                                                 int64_t rows, int64_t n, int64_t real, int64_t width,
                                                 int64_t keep) {
  aux_topk_rows(scores, cols, out, rows, n, real, width, keep);
}
extern "C" __global__ void sae_aux_topk_rows_bf16(const __nv_bfloat16* scores, const uint32_t* cols,
                                                  __nv_bfloat16* out, int64_t rows, int64_t n, int64_t real,
                                                  int64_t width, int64_t keep) {
  aux_topk_rows(scores, cols, out, rows, n, real, width, keep);
}
