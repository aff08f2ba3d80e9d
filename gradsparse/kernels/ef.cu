// Error-feedback kernels: the residual update over a list of gradient tensors (one launch for all
// parameters, no concatenation) and the fused sparse AdamW apply at the selected coordinates.
#include <cstdint>

// A slice of one parameter: `len` coordinates starting at `local` in tensor `tensor`, which sit at
// `flat` in the flat residual. One block per chunk.
struct Chunk {
    unsigned long long flat;
    unsigned long long local;
    unsigned int len;
    unsigned int tensor;
};

// residual[flat + i] += grad_t[local + i]; with a velocity (DGC momentum correction):
// u = mu * u + g, residual += u.
extern "C" __global__ void ef_accumulate(const Chunk* chunks, const unsigned long long* grads, float* residual,
                                         float* velocity, float mu) {
    const Chunk c = chunks[blockIdx.x];
    const float* g = reinterpret_cast<const float*>(grads[c.tensor]) + c.local;
    float* r = residual + c.flat;
    if (velocity != nullptr) {
        float* u = velocity + c.flat;
        for (unsigned int i = threadIdx.x; i < c.len; i += blockDim.x) {
            const float x = fmaf(mu, u[i], g[i]);
            u[i] = x;
            r[i] += x;
        }
    } else {
        for (unsigned int i = threadIdx.x; i < c.len; i += blockDim.x) {
            r[i] += g[i];
        }
    }
}

struct AdamArgs {
    const long long* idx;        // selected flat coordinates [k]
    const float* grad;           // their accumulated values [k]
    float* residual;             // zeroed at the selected coordinates
    float* velocity;             // likewise, when momentum correction is on (else null)
    float* m;
    float* v;
    const unsigned long long* span_end;  // exclusive end of each parameter in the flat space [spans]
    const unsigned long long* params;    // device pointer of each parameter (f32, contiguous) [spans]
    unsigned long long k;
    unsigned int spans;
    float beta1, beta2, scale_m, scale_v, eps, lr, decay;
};

// Lazy AdamW at the selected coordinates: moments and parameter updated there only.
extern "C" __global__ void ef_sparse_adamw(const AdamArgs a) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long j = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; j < a.k; j += stride) {
        const long long i = a.idx[j];
        const float g = a.grad[j];
        a.residual[i] = 0.f;
        if (a.velocity != nullptr) a.velocity[i] = 0.f;
        const float m = a.beta1 * a.m[i] + (1.f - a.beta1) * g;
        const float v = a.beta2 * a.v[i] + (1.f - a.beta2) * g * g;
        a.m[i] = m;
        a.v[i] = v;
        const float update = (m * a.scale_m) / (sqrtf(v * a.scale_v) + a.eps);
        unsigned int lo = 0, hi = a.spans - 1;
        while (lo < hi) {
            const unsigned int mid = (lo + hi) / 2;
            if (a.span_end[mid] > (unsigned long long)i) hi = mid; else lo = mid + 1;
        }
        const unsigned long long start = lo ? a.span_end[lo - 1] : 0ull;
        float* p = reinterpret_cast<float*>(a.params[lo]) + ((unsigned long long)i - start);
        *p = *p * a.decay - a.lr * update;
    }
}
