// Next-token cross-entropy of f32 logits [B, T, V] for u32 tokens [B, T]: position p of a sequence
// predicts token p + 1, so B (T - 1) rows count. Fixed-order reductions only (no atomics), so a run
// is bit-reproducible.
//
//   ce_rows:  one block per predicting row; one read of the row with an online (max, sum) pair per
//             thread, merged in a fixed tree; writes the row's log-sum-exp and loss (NaN for an
//             out-of-vocabulary target, or when the row holds NaN or +inf).
//   ce_mean:  one block sums the row losses in f64 in a fixed order and writes their mean.
//   ce_grad:  one block per row of [B, T, V]: (softmax - onehot) * g / rows, zeros for the last
//             position; g is the upstream gradient, read on the device (no host sync).
#include <math.h>
#include <stdint.h>

namespace {

constexpr int THREADS = 512;

struct MaxSum {
    float m;
    float s;
};

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
    const float m = fmaxf(a.m, b.m);
    if (m == -INFINITY) return {m, 0.f};
    return {m, a.s * __expf(a.m - m) + b.s * __expf(b.m - m)};
}

}  // namespace

extern "C" __global__ void __launch_bounds__(THREADS)
    ce_rows(const float* __restrict__ logits, const uint32_t* __restrict__ tokens,
            float* __restrict__ lse, float* __restrict__ loss, int t, int v) {
    const int r = blockIdx.x;  // predicting row, b-major: (seq, pos) with pos < t - 1
    const int seq = r / (t - 1), pos = r % (t - 1);
    const float* row = logits + ((size_t)seq * t + pos) * v;
    MaxSum acc = {-INFINITY, 0.f};
    bool bad = false;  // NaN or +inf: the loss is NaN, as on the CPU
    for (int j = threadIdx.x; j < v; j += THREADS) {
        const float x = row[j];
        bad |= !(x < INFINITY);
        if (x > acc.m) {
            acc.s = acc.s * __expf(acc.m - x) + 1.f;
            acc.m = x;
        } else {
            acc.s += __expf(x - acc.m);
        }
    }
    __shared__ float sm[THREADS], ss[THREADS];
    __shared__ int sbad;
    if (threadIdx.x == 0) sbad = 0;
    __syncthreads();
    if (bad) sbad = 1;
    sm[threadIdx.x] = acc.m;
    ss[threadIdx.x] = acc.s;
    __syncthreads();
    for (int half = THREADS / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            const MaxSum o = merge({sm[threadIdx.x], ss[threadIdx.x]},
                                   {sm[threadIdx.x + half], ss[threadIdx.x + half]});
            sm[threadIdx.x] = o.m;
            ss[threadIdx.x] = o.s;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        const uint32_t target = tokens[(size_t)seq * t + pos + 1];
        const float l = sbad ? NAN : sm[0] + logf(ss[0]);
        lse[r] = l;
        loss[r] = target < (uint32_t)v ? l - row[target] : NAN;
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
    ce_mean(const float* __restrict__ loss, float* __restrict__ out, int rows) {
    __shared__ double s[THREADS];
    double acc = 0.0;
    for (int i = threadIdx.x; i < rows; i += THREADS) acc += loss[i];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int half = THREADS / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) s[threadIdx.x] += s[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = (float)(s[0] / rows);
}

extern "C" __global__ void __launch_bounds__(THREADS)
    ce_grad(const float* __restrict__ logits, const uint32_t* __restrict__ tokens,
            const float* __restrict__ lse, const float* __restrict__ upstream,
            float* __restrict__ grad, int t, int v) {
    const int i = blockIdx.x;  // row of [B, T, V]
    const int seq = i / t, pos = i % t;
    float* out = grad + (size_t)i * v;
    if (pos + 1 == t) {
        for (int j = threadIdx.x; j < v; j += THREADS) out[j] = 0.f;
        return;
    }
    const int rows = gridDim.x / t * (t - 1);
    const float scale = *upstream / (float)rows;
    const float m = lse[seq * (t - 1) + pos];
    const float* row = logits + (size_t)i * v;
    const uint32_t target = tokens[(size_t)seq * t + pos + 1];
    for (int j = threadIdx.x; j < v; j += THREADS) {
        const float g = scale * __expf(row[j] - m);
        out[j] = (uint32_t)j == target ? g - scale : g;
    }
}
