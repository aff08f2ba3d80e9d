// CUB's stable device-wide radix sort of (u32 key, u32 value) pairs behind a C interface, called from
// Rust with candle's stream. With `temp == nullptr` it only writes the temporary storage size.
#include <cub/device/device_radix_sort.cuh>
#include <cstdint>

extern "C" int sae_sort_pairs_u32(void* temp, size_t* temp_bytes, const uint32_t* kin, uint32_t* kout,
                                  const uint32_t* vin, uint32_t* vout, int64_t items, int end_bit,
                                  cudaStream_t stream) {
  return (int)cub::DeviceRadixSort::SortPairs(temp, *temp_bytes, kin, kout, vin, vout, items, 0, end_bit, stream);
}
