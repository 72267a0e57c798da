// Combine kernel (spec §3): merge_row (merge.cuh) by a lane group per row, over every row or
// over the rows of the pairs a list names.
#pragma once

#include <cstdint>

#include "cuda/combine/merge.cuh"
#include "cuda/combine/params.h"
#include "cuda/common/ptx.cuh"
#include "msa/tensor.h"

namespace msa::cuda::combine {

constexpr int kThreads = 256;
template <int kD>
inline constexpr int kRowsPerCta = kThreads / Lanes<kD>::kPerRow;  // lane groups of a CTA

// Three CTAs per SM (80 registers): without the bound ptxas takes 97-115 and fits two.
template <DType kDtype, int kD>
__global__ void __launch_bounds__(kThreads, 3) combine_kernel(const CombineParams p) {
  constexpr int kLanes = Lanes<kD>::kPerRow;
  constexpr int kRows = kRowsPerCta<kD>;
  const int lane = threadIdx.x & 31;
  const int sub = lane & (kLanes - 1);
  const int group_in_cta = static_cast<int>(threadIdx.x) / kLanes;
  const unsigned group_mask = kLanes == 32 ? kFullMask : ((1u << kLanes) - 1u) << (lane & ~(kLanes - 1));

  // Partials come from the previous kernel on the stream (programmatic dependent launch).
  wait_for_previous_grid();
  if (p.tile_list == nullptr) {  // a lane group per row, every row
    const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kRows + group_in_cta;
    if (row >= p.total_q * p.h_q) return;  // whole lane groups leave together
    const std::int64_t q = row / p.h_q;
    merge_row<kDtype, kD>(p, q, static_cast<int>(row - q * p.h_q), sub, group_mask);
    return;
  }
  // The listed pairs' rows: CTA i takes the pair at position i of the list (past the count it
  // leaves at once), kRows of its rows r at a time (query r / group of its tile, head
  // r % group of its KV head's group). Whole lane groups leave together. (Pairs are fewer than
  // 2^30: 32-bit indices.)
  const int pairs = (p.h_q / p.group) * static_cast<int>(p.tiles_per_head);
  const int i = static_cast<int>(blockIdx.x);
  if (i >= min(*p.tile_count, pairs)) return;
  const int pair = p.tile_list[i];
  if (pair < 0 || pair >= pairs) return;
  const int kv_head = pair / static_cast<int>(p.tiles_per_head);
  const int q0 = (pair - kv_head * static_cast<int>(p.tiles_per_head)) * p.q_per_tile;  // < total_q
  const int pair_rows = p.q_per_tile * p.group;
#pragma unroll 1
  for (int r = group_in_cta; r < pair_rows; r += kRows) {
    const int lq = r / p.group;
    if (lq >= p.total_q - q0) return;  // rows go up with r
    merge_row<kDtype, kD>(p, std::int64_t(q0) + lq, kv_head * p.group + r % p.group, sub, group_mask);
  }
}

}  // namespace msa::cuda::combine
