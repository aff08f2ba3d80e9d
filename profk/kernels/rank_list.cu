// The sorted outputs of few rows straight from their lists (rank_list.cuh): the grid's count and
// scatter by first digit, or each block reading its row's whole list.
#include <cooperative_groups.h>
#include <cub/block/block_radix_sort.cuh>
#include "rank_list.cuh"

#define RANK_LISTS(SUF, T)                                                                        \
  extern "C" __global__ void __launch_bounds__(RL_THREADS) rank_lists_##SUF(RankListArgs a) { \
    dependent_launch_entry();                                                                     \
    rank_lists<T>(a);                                                                             \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(RL_THREADS) rank_whole_##SUF(RankListArgs a) { \
    dependent_launch_entry();                                                                     \
    rank_whole<T>(a);                                                                             \
  }

RANK_LISTS(f32, float)
RANK_LISTS(f16, __half)
RANK_LISTS(bf16, __nv_bfloat16)
