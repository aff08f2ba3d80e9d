// Prof-K over an accumulation: acc = residual + grad (or, with DGC momentum correction, u = mu*u +
// grad and acc = residual + u) over a list of gradient tensors laid end to end in one flat
// residual, without a flat gradient copy. The first attempt samples acc at the sampled positions
// (computed on the fly, nothing written), then one pass reads grad and residual, writes acc back
// into the residual (and u), and keeps the candidates at or above the threshold in the buffer, with
// the count check of filter.cu.
// Later attempts and the fallback run on the updated residual, so no gradient is ever added twice.
//
// Rounding: acc = residual + x with x = fmaf(mu, u, g) or g, one rounding each, as the CPU path
// does.
#include "filter.cuh"
#include "sample.cuh"

// A work item of the pass: `len` coordinates of tensor `tensor` starting at flat offset `flat`.
struct AccChunk {
  u64 flat;
  u32 len, tensor;
};
static_assert(sizeof(AccChunk) == 16,
              "AccChunk: the size its Rust mirror (src/cuda/abi.rs) asserts");

struct AccArgs {
  float* residual;        // [n], updated in place by the pass
  float* velocity;        // [n] or null (no momentum correction)
  // device address of each gradient (f32, contiguous), 0: none to add [spans]
  const u64* grads;
  const u64* starts;      // flat offset of each gradient, then n [spans + 1]
  const AccChunk* chunks;  // [nchunks]
  u64 nchunks, n;
  u32 spans;
  float mu;
};
static_assert(sizeof(AccArgs) == 64, "AccArgs: the size its Rust mirror (src/cuda/abi.rs) asserts");

// The gradient addend of one coordinate: g, or the momentum-corrected velocity mu*u + g.
__device__ __forceinline__ float addend(const AccArgs& a, u64 i, float g) {
  return a.velocity ? fmaf(a.mu, a.velocity[i], g) : g;
}

// acc at flat coordinate i, computed without writing anything (the sample of the first attempt). A
// span without a gradient (already in the residual) is read as it is.
struct AccKey {
  const AccArgs* a;
  int mag;
  __device__ __forceinline__ u32 operator()(u64, u64 i) const {
    u32 lo = 0, hi = a->spans - 1;  // the last span whose start is <= i
    while (lo < hi) {
      const u32 mid = (lo + hi + 1) / 2;
      if (a->starts[mid] <= i) lo = mid; else hi = mid - 1;
    }
    const u64 g = a->grads[lo];
    const float r = a->residual[i];
    if (g == 0) return Ops<float>::key(r, mag);
    return Ops<float>::key(r + addend(*a, i, reinterpret_cast<const float*>(g)[i - a->starts[lo]]),
                           mag);
  }
};

extern "C" __global__ void acc_sample(SampleArgs s, AccArgs a) {
  dependent_launch_entry();
  sample_body(s, AccKey{&a, s.mag});
}

extern "C" __global__ void __launch_bounds__(1024)
    acc_sample_select(SampleArgs s, RowSel* sel, u32 t, int ib, int tb, AccArgs a) {
  dependent_launch_entry();
  sample_select_body<1024>(s, sel, t, ib, tb, AccKey{&a, s.mag});
}
extern "C" __global__ void __launch_bounds__(256)
    acc_sample_select_small(SampleArgs s, RowSel* sel, u32 t, int ib, int tb, AccArgs a) {
  dependent_launch_entry();
  sample_select_body<256>(s, sel, t, ib, tb, AccKey{&a, s.mag});
}

// One chunk's coordinates as (gradient, residual, velocity) pointers; g is null where there is none
// to add.
struct ChunkPtrs {
  const float* g;
  float* r;
  float* u;
  u64 flat;
  u32 len;
};

__device__ __forceinline__ ChunkPtrs chunk_ptrs(const AccArgs& a, u64 c) {
  const AccChunk ch = a.chunks[c];
  const u64 base = a.grads[ch.tensor];
  const float* g =
      base ? reinterpret_cast<const float*>(base) + (ch.flat - a.starts[ch.tensor]) : nullptr;
  return ChunkPtrs{g, a.residual + ch.flat, a.velocity ? a.velocity + ch.flat : nullptr, ch.flat,
                   ch.len};
}

// 16-byte loads and stores need every pointer aligned and whole vectors.
__device__ __forceinline__ bool vectorizable(const ChunkPtrs& p) {
  const u64 bits = (u64)p.g | (u64)p.r | (u64)p.u;
  return bits % 16 == 0 && p.len % 4 == 0;
}

__device__ __forceinline__ float lane(const float4& v, int q) {
  return q == 0 ? v.x : q == 1 ? v.y : q == 2 ? v.z : v.w;
}

// Plain accumulation (no selection): the exact-selection and baseline paths, and callers that only
// add.
extern "C" __global__ void __launch_bounds__(FT) acc_add(AccArgs a) { dependent_launch_entry();
  for (u64 c = blockIdx.x; c < a.nchunks; c += gridDim.x) {
    const ChunkPtrs p = chunk_ptrs(a, c);
    if (!p.g) continue;  // nothing to add
    if (vectorizable(p)) {
      const float4* g4 = reinterpret_cast<const float4*>(p.g);
      float4* r4 = reinterpret_cast<float4*>(p.r);
      float4* u4 = reinterpret_cast<float4*>(p.u);
      for (u32 v = threadIdx.x; v < p.len / 4; v += FT) {
        float4 g = __ldcs(&g4[v]), r = __ldcs(&r4[v]);
        if (p.u) {
          float4 u = __ldcs(&u4[v]);
          g = make_float4(fmaf(a.mu, u.x, g.x), fmaf(a.mu, u.y, g.y), fmaf(a.mu, u.z, g.z),
                          fmaf(a.mu, u.w, g.w));
          __stcs(&u4[v], g);
        }
        __stcs(&r4[v], make_float4(r.x + g.x, r.y + g.y, r.z + g.z, r.w + g.w));
      }
    } else {
      for (u32 i = threadIdx.x; i < p.len; i += FT) {
        float x = p.g[i];
        if (p.u) {
          x = fmaf(a.mu, p.u[i], x);
          p.u[i] = x;
        }
        p.r[i] = p.r[i] + x;
      }
    }
  }
}

struct AccFilterArgs {
  AccArgs acc;
  const RowSel* sel;
  RowRun* run;
  u32* bkeys;
  u64* bidx;
  Global* g;
  u64 cap, k;
  int mag, ib, use_tmin, count_nan;
  int last_attempt, approximate;
  int pad[2];
};
static_assert(sizeof(AccFilterArgs) == 152,
              "AccFilterArgs: the size its Rust mirror (src/cuda/abi.rs) asserts");

// Attempt 1 of Prof-K fused with the accumulation: every block takes chunks, writes acc back and
// stages the candidates (composite >= the sampled threshold) of each chunk; the last block runs the
// check.
template <bool VELOCITY>
__device__ void acc_filter_body(const AccFilterArgs& a, Stage& st) {
  if (threadIdx.x == 0) {
    st.count = 0;
    st.valid = SCAP;
    st.kmax = 0;
  }
  __syncthreads();
  const u64 n = a.acc.n;
  const u64 ib_mask = a.ib >= 64 ? ~0ull : ((1ull << a.ib) - 1);
  const u128 tau = a.use_tmin ? (u128)a.sel[0].tmin : load_prefix(a.sel[0]);
  const u32 tk = (u32)(tau >> a.ib);
  const u64 tidx = n - 1 - ((u64)tau & ib_mask);  // keep key > tk, or key == tk and index <= tidx
  const float tf = key_value<float>(tk, a.mag);
  const float mu = a.acc.mu;
  float* const res = a.acc.residual;
  // Exact test and key of a candidate from the residual this thread has just written.
  auto key_of = [&](u64 j) { return Ops<float>::key_bits(__float_as_uint(res[j]), a.mag); };
  u64 nan_c = 0, nan_first = ~0ull;
  auto exact = [&](u64 j) {
    const u32 bits = __float_as_uint(res[j]);
    const u32 key = Ops<float>::key_bits(bits, a.mag);
    if (a.count_nan && Ops<float>::nan_bits(bits)) {
      ++nan_c;
      nan_first = min(nan_first, j);
    }
    return key > tk || (key == tk && j <= tidx);
  };
  // Chunks of one block-iteration each, dealt in order from a counter: the blocks in flight then
  // read one contiguous stretch of g and r at a time, as the in-order blocks of a plain elementwise
  // kernel do (a static deal has every block streaming from its own place). Thread 0 fetches the
  // next chunk while this one is processed and publishes it at the end (two slots: a slot is
  // rewritten only after the barrier that follows every thread's read of it).
  __shared__ u64 next[2];
  if (threadIdx.x == 0) next[0] = atomicAdd(&a.g->next_item, 1ull);
  __syncthreads();
  u32 slot = 0;
  for (u64 c = next[0]; c < a.acc.nchunks;) {
    u64 fetched = 0;
    if (threadIdx.x == 0) fetched = atomicAdd(&a.g->next_item, 1ull);
    const ChunkPtrs p = chunk_ptrs(a.acc, c);
    // Without a gradient (validated: no velocity either) the chunk is only read: acc = r,
    // unwritten.
    const bool add = p.g != nullptr;
    if (vectorizable(p)) {
      const float4* g4 = reinterpret_cast<const float4*>(p.g);
      float4* r4 = reinterpret_cast<float4*>(p.r);
      float4* u4 = reinterpret_cast<float4*>(p.u);
      const u64 nvec = p.len / 4;
      for (u64 vb = 0; vb < nvec; vb += (u64)FT * UNROLL) {
        float4 g[UNROLL], r[UNROLL];
#pragma unroll
        for (int s = 0; s < UNROLL; ++s) {
          const u64 v = vb + (u64)s * FT + threadIdx.x;
          g[s] = v < nvec && add ? __ldcs(&g4[v]) : float4{};
          r[s] = v < nvec ? __ldcs(&r4[v]) : float4{};
        }
        if (VELOCITY) {
#pragma unroll
          for (int s = 0; s < UNROLL; ++s) {
            const u64 v = vb + (u64)s * FT + threadIdx.x;
            if (v < nvec) {
              const float4 u = __ldcs(&u4[v]);
              g[s] = make_float4(fmaf(mu, u.x, g[s].x), fmaf(mu, u.y, g[s].y),
                                 fmaf(mu, u.z, g[s].z), fmaf(mu, u.w, g[s].w));
              __stcs(&u4[v], g[s]);
            }
          }
        }
        u32 cand = 0;
#pragma unroll
        for (int s = 0; s < UNROLL; ++s) {
          const u64 v = vb + (u64)s * FT + threadIdx.x;
          const float4 acc =
              add ? make_float4(r[s].x + g[s].x, r[s].y + g[s].y, r[s].z + g[s].z, r[s].w + g[s].w)
                  : r[s];
          if (v < nvec && add) __stcs(&r4[v], acc);
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            float x = lane(acc, q);
            if (a.mag) x = fabsf(x);
            if (v < nvec && !(x < tf)) cand |= 1u << (s * 4 + q);
          }
        }
        const u64 j0 = p.flat + (vb + threadIdx.x) * 4;
        auto index = [&](int e) { return j0 + (u64)(e / 4) * FT * 4 + (e % 4); };
        u32 keep = 0;
        for (u32 cs = cand; cs;) {
          const int e = __ffs(cs) - 1;
          cs &= cs - 1;
          if (exact(index(e))) keep |= 1u << e;
        }
        warp_commit(st, a, 0, keep, key_of, index);
      }
    } else {
      for (u64 b = 0; b < p.len; b += FT) {
        const u64 i = b + threadIdx.x;
        bool keep = false;
        if (i < p.len) {
          float acc = p.r[i];
          if (add) {
            float x = p.g[i];
            if (VELOCITY) {
              x = fmaf(mu, p.u[i], x);
              p.u[i] = x;
            }
            acc += x;
            p.r[i] = acc;
          }
          const float m = a.mag ? fabsf(acc) : acc;
          keep = !(m < tf) && exact(p.flat + i);
        }
        warp_commit(st, a, 0, keep, key_of, [&](int) { return p.flat + i; });
      }
    }
    // Every chunk feeds row 0: the staging area is flushed only once it is half full (one global
    // atomic and three barriers per flush), and once at the end.
    slot ^= 1;
    if (threadIdx.x == 0) next[slot] = fetched;
    __syncthreads();
    if (st.count >= SCAP / 2 || st.valid < SCAP) flush(st, a, 0);
    c = next[slot];
  }
  flush(st, a, 0);
  if (nan_c) {
    atomicAdd(&a.g->nan_count, nan_c);
    atomicMax(&a.g->nan_first, ~nan_first);  // stored inverted: zero means none
  }
  finish_row(a, 0, gridDim.x);
}

extern "C" __global__ void __launch_bounds__(FT, 2) acc_filter(AccFilterArgs a) {
  dependent_launch_entry();
  __shared__ Stage st;
  if (a.acc.velocity) {
    acc_filter_body<true>(a, st);
  } else {
    acc_filter_body<false>(a, st);
  }
}
