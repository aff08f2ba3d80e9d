// The top-k peers of Prof-K on one benchmark case, from their own headers:
//   flashinfer      FlashInfer 0.7.2 sampling::TopKDispatch (FilteredTopK for k <= 2048, multi-CTA
//                   radix otherwise), non-deterministic (its default)
//   flashinfer_det  the same, deterministic
//   cub             CUB (CCCL 3.3, as bundled with FlashInfer 0.7.2) DeviceTopK::MaxPairs: one
//                   sequence only, unsorted, determinism not guaranteed (the one configuration it
//                   implements)
// Timed like `profk bench --device cuda`: CUDA events around each call, median of REPS after a
// warm-up, inputs rotated when three copies fit in 1 GiB. The first call's result is checked on the
// host against the true top-k of every row: the value multiset, indices distinct, in range and
// pointing at their values. Prints exactly one JSON line, also on failure: a launch or device
// error, a failed check, or no completion within --limit seconds (the multi-CTA radix path hangs on
// some shapes), after which the process exits without waiting for the device.
//
//   topk_peers --peer flashinfer|flashinfer_det|cub --shape LABEL --rows R --n N --k K
//              --dtype f32|bf16|f16 [--masked] [--reps 15] [--limit 120]
//
// Built by bench/peers/build_topk_peers.sh, run case by case by bench/peers/topk_peers.sh.
#define CUB_DISABLE_TOPK_UNSUPPORTED_ARCH_ASSERT
#include <cuda/__execution/determinism.h>
#include <cuda/__execution/output_ordering.h>
#include <cuda/__execution/require.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cub/device/device_topk.cuh>
#include <flashinfer/math.cuh>  // topk.cuh uses math:: without including it
#include <flashinfer/topk.cuh>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <thrust/iterator/counting_iterator.h>
#include <unistd.h>
#include <vector>

namespace {

struct Case {
  std::string peer, shape, dtype;
  size_t rows = 0, n = 0, k = 0;
  bool masked = false;
  int reps = 15;
  int limit_s = 120;
};

// One JSON line per process: the first report wins, later ones (the watchdog racing the main
// thread) are dropped.
std::mutex report_lock;
bool reported = false;

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out + "\"";
}

void report(const Case& c, double ms, size_t aux_bytes, const std::string& error) {
  std::lock_guard<std::mutex> g(report_lock);
  if (reported) return;
  reported = true;
  std::string ms_text = std::isfinite(ms) ? std::to_string(ms) : "null";
  printf(
      "{\"peer\":%s,\"shape\":%s,\"rows\":%zu,\"n\":%zu,\"k\":%zu,\"dtype\":%s,\"masked\":%s,"
      "\"ms\":%s,\"aux_bytes\":%zu,\"ok\":%s,\"error\":%s}\n",
      json_string(c.peer).c_str(), json_string(c.shape).c_str(), c.rows, c.n, c.k,
      json_string(c.dtype).c_str(), c.masked ? "true" : "false", ms_text.c_str(), aux_bytes,
      error.empty() ? "true" : "false", error.empty() ? "null" : json_string(error).c_str());
  fflush(stdout);
}

// Reports a hang and ends the process: a kernel that never finishes cannot be waited out.
void start_watchdog(const Case& c) {
  std::thread([c] {
    std::this_thread::sleep_for(std::chrono::seconds(c.limit_s));
    report(c, NAN, 0, "hang: no completion within " + std::to_string(c.limit_s) + " s");
    _exit(3);
  }).detach();
}

struct Failure {
  std::string what;
};

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Failure{std::string(what) + ": " + cudaGetErrorString(e)};
}

__device__ inline unsigned long long mix(unsigned long long z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

template <typename T>
__device__ inline T from_float(float v);
template <>
__device__ inline float from_float<float>(float v) {
  return v;
}
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ inline __half from_float<__half>(float v) {
  return __float2half_rn(v);
}

// Standard normals (Box-Muller on a counter hash); masked rows have their second half at -inf, the
// block-selection shape.
template <typename T>
__global__ void fill(T* x, size_t total, size_t n, unsigned long long seed, bool masked) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    unsigned long long h = mix(seed * 0x100000001B3ull + i);
    float u1 = ((h >> 40) + 1) * (1.0f / 16777217.0f);
    float u2 = (h & 0xFFFFFF) * (1.0f / 16777216.0f);
    float v = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    if (masked && i % n >= n / 2) v = -INFINITY;
    x[i] = from_float<T>(v);
  }
}

float to_float(float v) { return v; }
float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
float to_float(__half v) { return __half2float(v); }

template <typename T>
std::vector<float> to_host(const T* d, size_t len) {
  std::vector<T> raw(len);
  check_cuda(cudaMemcpy(raw.data(), d, len * sizeof(T), cudaMemcpyDeviceToHost), "copy to host");
  std::vector<float> out(len);
  for (size_t i = 0; i < len; i++) out[i] = to_float(raw[i]);
  return out;
}

// Empty when every row's k values are the row's true top-k multiset and each index is distinct, in
// range and points at its value; else the first difference. Reorders `x` in place.
template <typename Index>
std::string check_rows(std::vector<float>& x, const Case& c, const std::vector<float>& values,
                       const std::vector<Index>& indices) {
  std::vector<float> got(c.k);
  std::vector<Index> seen(c.k);
  for (size_t r = 0; r < c.rows; r++) {
    float* row = x.data() + r * c.n;
    for (size_t j = 0; j < c.k; j++) {
      Index i = indices[r * c.k + j];
      float v = values[r * c.k + j];
      if (i < 0 || static_cast<size_t>(i) >= c.n)
        return "check: row " + std::to_string(r) + " index " + std::to_string(i) + " out of range";
      if (!(row[i] == v))
        return "check: row " + std::to_string(r) + " value at index " + std::to_string(i) +
               " differs from the input";
      got[j] = v;
      seen[j] = i;
    }
    std::sort(seen.begin(), seen.end());
    if (std::adjacent_find(seen.begin(), seen.end()) != seen.end())
      return "check: row " + std::to_string(r) + " repeats an index";
    std::nth_element(row, row + c.k - 1, row + c.n, std::greater<float>());
    std::sort(row, row + c.k, std::greater<float>());
    std::sort(got.begin(), got.end(), std::greater<float>());
    if (!std::equal(got.begin(), got.end(), row))
      return "check: row " + std::to_string(r) + " values are not the top-k multiset";
  }
  return "";
}

double median_ms(const std::function<cudaError_t(int)>& call, int reps) {
  for (int i = 0; i < 3; i++) check_cuda(call(i), "warm-up launch");
  check_cuda(cudaDeviceSynchronize(), "warm-up");
  cudaEvent_t a, b;
  check_cuda(cudaEventCreate(&a), "event");
  check_cuda(cudaEventCreate(&b), "event");
  std::vector<float> t;
  for (int i = 0; i < reps; i++) {
    check_cuda(cudaEventRecord(a), "event record");
    check_cuda(call(i), "timed launch");
    check_cuda(cudaEventRecord(b), "event record");
    check_cuda(cudaEventSynchronize(b), "timed call");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, a, b), "event time");
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// FlashInfer's Python wrapper allocates its multi-CTA row states as 1 MiB, zero-initialized.
constexpr size_t FLASHINFER_ROW_STATES = 1 << 20;

template <typename T>
void run(const Case& c) {
  const size_t total = c.rows * c.n;
  if (c.peer == "cub" && c.rows != 1)
    throw Failure{"unsupported: CUB DeviceTopK selects from one sequence, not from rows"};
  if (c.n > UINT32_MAX || c.k > UINT32_MAX)
    throw Failure{"unsupported: FlashInfer takes 32-bit row lengths and k"};
  const int copies = total * sizeof(T) * 3 <= (size_t(1) << 30) ? 3 : 1;
  std::vector<T*> xs(copies);
  for (int i = 0; i < copies; i++) {
    check_cuda(cudaMalloc(&xs[i], total * sizeof(T)), "input allocation");
    fill<T><<<1024, 256>>>(xs[i], total, c.n, 1234 + i, c.masked);
  }
  check_cuda(cudaDeviceSynchronize(), "input fill");
  T* out_values;
  check_cuda(cudaMalloc(&out_values, c.rows * c.k * sizeof(T)), "output allocation");

  double ms;
  size_t aux = 0;
  std::string error;
  if (c.peer == "cub") {
    namespace ex = cuda::execution;
    auto env = ex::require(ex::determinism::not_guaranteed, ex::output_ordering::unsorted);
    auto positions = thrust::counting_iterator<int64_t>(0);
    int64_t* out_indices;
    check_cuda(cudaMalloc(&out_indices, c.k * sizeof(int64_t)), "output allocation");
    check_cuda(cub::DeviceTopK::MaxPairs(nullptr, aux, xs[0], out_values, positions, out_indices,
                                         static_cast<int64_t>(c.n), static_cast<int64_t>(c.k), env),
               "CUB workspace query");
    void* tmp = nullptr;
    check_cuda(cudaMalloc(&tmp, aux), "CUB workspace allocation");
    auto call = [&](int i) {
      return cub::DeviceTopK::MaxPairs(tmp, aux, xs[i % copies], out_values, positions,
                                       out_indices, static_cast<int64_t>(c.n),
                                       static_cast<int64_t>(c.k), env);
    };
    check_cuda(call(0), "launch");
    check_cuda(cudaDeviceSynchronize(), "first call");
    std::vector<float> values = to_host(out_values, c.k);
    std::vector<int64_t> indices(c.k);
    check_cuda(
        cudaMemcpy(indices.data(), out_indices, c.k * sizeof(int64_t), cudaMemcpyDeviceToHost),
        "copy to host");
    std::vector<float> x = to_host(xs[0], total);
    error = check_rows(x, c, values, indices);
    ms = median_ms(call, c.reps);
  } else {
    const bool deterministic = c.peer == "flashinfer_det";
    namespace fs = flashinfer::sampling;
    fs::RadixRowState* row_states;
    check_cuda(cudaMalloc(&row_states, FLASHINFER_ROW_STATES), "row-state allocation");
    check_cuda(cudaMemset(row_states, 0, FLASHINFER_ROW_STATES), "row-state reset");
    aux = FLASHINFER_ROW_STATES;
    int32_t* out_indices;
    check_cuda(cudaMalloc(&out_indices, c.rows * c.k * sizeof(int32_t)), "output allocation");
    auto call = [&](int i) {
      return fs::TopKDispatch<T, int32_t>(xs[i % copies], out_indices, out_values,
                                          static_cast<uint32_t>(c.rows), static_cast<uint32_t>(c.k),
                                          static_cast<uint32_t>(c.n), row_states, false,
                                          deterministic, fs::TopKTieBreak::None, 0, false);
    };
    check_cuda(call(0), "launch");
    check_cuda(cudaDeviceSynchronize(), "first call");
    std::vector<float> values = to_host(out_values, c.rows * c.k);
    std::vector<int32_t> indices(c.rows * c.k);
    check_cuda(cudaMemcpy(indices.data(), out_indices, indices.size() * sizeof(int32_t),
                          cudaMemcpyDeviceToHost),
               "copy to host");
    std::vector<float> x = to_host(xs[0], total);
    error = check_rows(x, c, values, indices);
    ms = median_ms(call, c.reps);
  }
  report(c, ms, aux, error);
}

[[noreturn]] void usage(const std::string& why) {
  fprintf(stderr,
          "topk_peers: %s\nusage: topk_peers --peer flashinfer|flashinfer_det|cub --shape LABEL "
          "--rows R --n N --k K --dtype f32|bf16|f16 [--masked] [--reps 15] [--limit 120]\n",
          why.c_str());
  exit(2);
}

Case parse(int argc, char** argv) {
  Case c;
  for (int i = 1; i < argc; i++) {
    std::string flag = argv[i];
    if (flag == "--masked") {
      c.masked = true;
      continue;
    }
    if (i + 1 >= argc) usage(flag + " needs a value");
    std::string v = argv[++i];
    char* end = nullptr;
    auto number = [&] {
      unsigned long long x = strtoull(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0') usage(flag + " " + v + ": not a number");
      return static_cast<size_t>(x);
    };
    if (flag == "--peer") c.peer = v;
    else if (flag == "--shape") c.shape = v;
    else if (flag == "--dtype") c.dtype = v;
    else if (flag == "--rows") c.rows = number();
    else if (flag == "--n") c.n = number();
    else if (flag == "--k") c.k = number();
    else if (flag == "--reps") c.reps = static_cast<int>(number());
    else if (flag == "--limit") c.limit_s = static_cast<int>(number());
    else usage("unknown flag " + flag);
  }
  if (c.peer != "flashinfer" && c.peer != "flashinfer_det" && c.peer != "cub")
    usage("--peer must be flashinfer, flashinfer_det or cub");
  if (c.dtype != "f32" && c.dtype != "bf16" && c.dtype != "f16")
    usage("--dtype must be f32, bf16 or f16");
  if (c.rows == 0 || c.n == 0 || c.k == 0 || c.k > c.n || c.reps == 0 || c.limit_s == 0)
    usage("needs rows, n, reps and limit > 0 and 0 < k <= n");
  if (c.shape.empty()) c.shape = std::to_string(c.rows) + "x" + std::to_string(c.n);
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  const Case c = parse(argc, argv);
  start_watchdog(c);
  try {
    if (c.dtype == "f32") run<float>(c);
    else if (c.dtype == "bf16") run<__nv_bfloat16>(c);
    else run<__half>(c);
  } catch (const Failure& f) {
    report(c, NAN, 0, f.what);
    _exit(1);
  } catch (const std::exception& e) {
    report(c, NAN, 0, std::string("exception: ") + e.what());
    _exit(1);
  }
  _exit(0);
}
