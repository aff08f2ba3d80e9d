// The fused sparse AdamW apply of error feedback at the selected coordinates (the residual update
// is profk's accumulate kernel, fused into the selection).
#include <cstdint>

struct AdamArgs {
    const long long* idx;        // selected flat coordinates [k]
    const float* grad;           // their accumulated values [k]
    float* residual;             // zeroed at the selected coordinates
    float* velocity;             // likewise, when momentum correction is on (else null)
    float* m;
    float* v;
    // exclusive end of each parameter in the flat space [spans]
    const unsigned long long* span_end;
    // device pointer of each parameter (f32, contiguous) [spans]
    const unsigned long long* params;
    unsigned long long k;
    unsigned int spans;
    float beta1, beta2, scale_m, scale_v, eps, lr, decay;
};

// Lazy AdamW at the selected coordinates: moments and parameter updated there only.
extern "C" __global__ void ef_sparse_adamw(const AdamArgs a) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long j = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; j < a.k;
         j += stride) {
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
