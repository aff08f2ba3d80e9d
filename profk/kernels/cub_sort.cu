// CUB radix sorts behind a C interface, archived into a static library and called from Rust with
// candle's stream. Each function follows CUB's two-phase protocol: with `temp == nullptr` it only
// writes the temporary storage size. Rows of equal length are segments; one row uses the
// device-wide sort (fast for long rows), several the segmented sort. Both sorts used here are
// stable.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_sort.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <cstdint>
#include <type_traits>

namespace {
struct RowStart {
  int64_t len;
  __host__ __device__ int64_t operator()(int64_t r) const { return r * len; }
};
auto offsets(int64_t len, int64_t first) {
  return thrust::make_transform_iterator(thrust::make_counting_iterator<int64_t>(first),
                                         RowStart{len});
}

// CUB's sm_90 tuning cuts a pass over 64-bit keys into tiles of 5 760 (384 threads, 15 keys each),
// sized for throughput on tens of millions of keys: a few hundred thousand keys then make a few
// dozen tiles, and each pass runs on a few dozen of the 132 SMs. These tiles hold 4 keys a thread
// of THREADS (2 048 or 1 024 of 64-bit keys), so that the same keys spread over the device; every
// other policy is CUB's own.
template <typename KeyT, typename ValueT, typename OffsetT, int THREADS>
struct SmallTiles {
  using Cub = cub::detail::radix::policy_hub<KeyT, ValueT, OffsetT>;
  static constexpr size_t VALUE_BYTES = std::is_same_v<ValueT, cub::NullType> ? 0 : sizeof(ValueT);
  using Tuned = typename Cub::template OnesweepSmallKeyTunedPolicy<
      cub::detail::radix::sm90_small_key_tuning<sizeof(KeyT), VALUE_BYTES, sizeof(OffsetT)>>;
  struct Policy900 : cub::ChainedPolicy<900, Policy900, Policy900>, Tuned {
    using OnesweepPolicy = cub::AgentRadixSortOnesweepPolicy<
        THREADS, 8, typename Cub::DominantT, 1, cub::RADIX_RANK_MATCH_EARLY_COUNTS_ANY,
        cub::BLOCK_SCAN_RAKING_MEMOIZE, cub::RADIX_SORT_STORE_DIRECT, Tuned::ONESWEEP_RADIX_BITS>;
  };
  using MaxPolicy = Policy900;
};

// A one-row sort by SmallTiles, as cub::DeviceRadixSort's SortKeys and SortPairs dispatch it.
template <cub::SortOrder Order, int THREADS, typename KeyT, typename ValueT>
cudaError_t sort_tiles_of(void* temp, size_t& temp_bytes, const KeyT* kin, KeyT* kout,
                          const ValueT* vin, ValueT* vout, int64_t items, int begin_bit,
                          int end_bit, cudaStream_t stream) {
  using OffsetT = cub::detail::choose_offset_t<int64_t>;
  using Dispatch =
      cub::DispatchRadixSort<Order, KeyT, ValueT, OffsetT, cub::detail::identity_decomposer_t,
                             SmallTiles<KeyT, ValueT, OffsetT, THREADS>>;
  cub::DoubleBuffer<KeyT> keys(const_cast<KeyT*>(kin), kout);
  cub::DoubleBuffer<ValueT> vals(const_cast<ValueT*>(vin), vout);
  return Dispatch::Dispatch(temp, temp_bytes, keys, vals, static_cast<OffsetT>(items), begin_bit,
                            end_bit, false, stream);
}

// sort_tiles_of with 512 threads a tile, or 256 when `tile` is 1 024 keys.
template <cub::SortOrder Order, typename KeyT, typename ValueT>
cudaError_t sort_small_tiles(int tile, void* temp, size_t& temp_bytes, const KeyT* kin, KeyT* kout,
                             const ValueT* vin, ValueT* vout, int64_t items, int begin_bit,
                             int end_bit, cudaStream_t stream) {
  return tile == 1024 ? sort_tiles_of<Order, 256>(temp, temp_bytes, kin, kout, vin, vout, items,
                                                  begin_bit, end_bit, stream)
                      : sort_tiles_of<Order, 512>(temp, temp_bytes, kin, kout, vin, vout, items,
                                                  begin_bit, end_bit, stream);
}
}  // namespace

// Sorts u64 keys of `rows` rows of `len`; one row on bits [begin_bit, end_bit) (stable), by
// SmallTiles of `tile` keys (2 048 or 1 024) when `tile` is not 0; several rows on all bits.
extern "C" int profk_sort_keys_u64(void* temp, size_t* temp_bytes, const uint64_t* in,
                                   uint64_t* out, int64_t rows, int64_t len, int descending,
                                   int begin_bit, int end_bit, int tile, cudaStream_t stream) {
  int64_t items = rows * len;
  cudaError_t e;
  if (rows == 1 && tile) {
    cub::NullType* none = nullptr;
    e = descending
            ? sort_small_tiles<cub::SortOrder::Descending>(tile, temp, *temp_bytes, in, out, none,
                                                           none, items, begin_bit, end_bit, stream)
            : sort_small_tiles<cub::SortOrder::Ascending>(tile, temp, *temp_bytes, in, out, none,
                                                          none, items, begin_bit, end_bit, stream);
  } else if (rows == 1) {
    e = descending ? cub::DeviceRadixSort::SortKeysDescending(temp, *temp_bytes, in, out, items,
                                                              begin_bit, end_bit, stream)
                   : cub::DeviceRadixSort::SortKeys(temp, *temp_bytes, in, out, items, begin_bit,
                                                    end_bit, stream);
  } else {
    e = descending
            ? cub::DeviceSegmentedSort::StableSortKeysDescending(
                  temp, *temp_bytes, in, out, items, rows, offsets(len, 0), offsets(len, 1), stream)
            : cub::DeviceSegmentedSort::StableSortKeys(temp, *temp_bytes, in, out, items, rows,
                                                       offsets(len, 0), offsets(len, 1), stream);
  }
  return (int)e;
}

// Stable sort of u32 keys (bits [begin_bit, 32)) descending, carrying u64 values; one row by
// SmallTiles of `tile` keys when `tile` is not 0.
extern "C" int profk_sort_pairs_desc_u32_u64(void* temp, size_t* temp_bytes, const uint32_t* kin,
                                             uint32_t* kout, const uint64_t* vin, uint64_t* vout,
                                             int64_t rows, int64_t len, int begin_bit, int tile,
                                             cudaStream_t stream) {
  int64_t items = rows * len;
  cudaError_t e;
  if (rows == 1 && tile) {
    e = sort_small_tiles<cub::SortOrder::Descending>(tile, temp, *temp_bytes, kin, kout, vin, vout,
                                                     items, begin_bit, 32, stream);
  } else if (rows == 1) {
    e = cub::DeviceRadixSort::SortPairsDescending(temp, *temp_bytes, kin, kout, vin, vout, items,
                                                  begin_bit, 32, stream);
  } else {
    e = cub::DeviceSegmentedSort::StableSortPairsDescending(temp, *temp_bytes, kin, kout, vin, vout,
                                                            items, rows, offsets(len, 0),
                                                            offsets(len, 1), stream);
  }
  return (int)e;
}
