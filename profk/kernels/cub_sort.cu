// CUB radix sorts behind a C interface, archived into a static library and called from Rust with
// candle's stream. Each function follows CUB's two-phase protocol: with `temp == nullptr` it only
// writes the temporary storage size. Rows of equal length are segments; one row uses the device-wide
// sort (fast for long rows), several the segmented sort. Both sorts used here are stable.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_sort.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <cstdint>

namespace {
struct RowStart {
  int64_t len;
  __host__ __device__ int64_t operator()(int64_t r) const { return r * len; }
};
auto offsets(int64_t len, int64_t first) {
  return thrust::make_transform_iterator(thrust::make_counting_iterator<int64_t>(first), RowStart{len});
}
}  // namespace

// Sorts u64 keys (bits [0, end_bit)) of `rows` rows of `len`.
extern "C" int profk_sort_keys_u64(void* temp, size_t* temp_bytes, const uint64_t* in, uint64_t* out, int64_t rows,
                                   int64_t len, int descending, int end_bit, cudaStream_t stream) {
  int64_t items = rows * len;
  cudaError_t e;
  if (rows == 1) {
    e = descending ? cub::DeviceRadixSort::SortKeysDescending(temp, *temp_bytes, in, out, items, 0, end_bit, stream)
                   : cub::DeviceRadixSort::SortKeys(temp, *temp_bytes, in, out, items, 0, end_bit, stream);
  } else {
    e = descending ? cub::DeviceSegmentedSort::StableSortKeysDescending(temp, *temp_bytes, in, out, items, rows,
                                                                       offsets(len, 0), offsets(len, 1), stream)
                   : cub::DeviceSegmentedSort::StableSortKeys(temp, *temp_bytes, in, out, items, rows, offsets(len, 0),
                                                              offsets(len, 1), stream);
  }
  return (int)e;
}

// Stable sort of u32 keys (bits [begin_bit, 32)) descending, carrying u64 values.
extern "C" int profk_sort_pairs_desc_u32_u64(void* temp, size_t* temp_bytes, const uint32_t* kin, uint32_t* kout,
                                             const uint64_t* vin, uint64_t* vout, int64_t rows, int64_t len,
                                             int begin_bit, cudaStream_t stream) {
  int64_t items = rows * len;
  cudaError_t e;
  if (rows == 1) {
    e = cub::DeviceRadixSort::SortPairsDescending(temp, *temp_bytes, kin, kout, vin, vout, items, begin_bit, 32,
                                                  stream);
  } else {
    e = cub::DeviceSegmentedSort::StableSortPairsDescending(temp, *temp_bytes, kin, kout, vin, vout, items, rows,
                                                            offsets(len, 0), offsets(len, 1), stream);
  }
  return (int)e;
}
