// One warp's selection of a row's best keys (core/topk_key.h's 64-bit keys: unique but for the
// empty 0), shared by the top-k kernel (keys from scores) and the fused indexer's merge (keys
// from per-chunk partial lists). A row is ranked by kWidth lanes: the whole warp (32), or a half
// warp (16, two rows side by side in one warp's instructions, for `want` <= 16). The lanes keep
// the best `want` keys as one sorted list across them: lane s holds the s-th best.
//
// Pass 1 takes each lane's largest key and sorts the kWidth lane maxima across the lanes
// (bitonic): the list starts as their best `want`, so the bar a candidate must beat is already
// near its final value. A half-warp row seeds the list with each lane's best two keys instead
// (the best kWidth of those 2 kWidth): 16 lane maxima alone left about 9 insertions per row of
// random scores (docs/performance.md, steps 34 and 37). Pass 2 takes the row's keys again (the
// first kCached groups' kept in registers, the rest asked for again) and inserts only the keys
// above the bar that are not a lane's seed: a ballot finds them, each goes in with one ballot
// (its position) and one shuffle (the worse keys move down).
#pragma once

#include <climits>
#include <cstdint>

#include "cuda/plan/tile_keys.cuh"  // request_of_query
#include "msa/shapes.h"             // kBlockSize

namespace msa::cuda::topk_select {

// A row's facts before its selection, shared by the top-k kernel and the fused indexer's merge.
// The position of packed query q (bottom-right causal): k_len[b] - q_len[b] + (q - first query
// of b), for its request b (strides in elements).
__device__ __forceinline__ std::int64_t row_position(const std::int32_t* cu_seqlens_q, std::int64_t cu_stride,
                                                     const std::int32_t* k_len, std::int64_t k_len_stride, int batch,
                                                     std::int64_t q) {
  const int b = request_of_query(cu_seqlens_q, batch, q, 0, cu_stride);
  const std::int64_t q0 = cu_seqlens_q[b * cu_stride];
  const std::int64_t q_len = cu_seqlens_q[(b + 1) * cu_stride] - q0;
  return std::int64_t{k_len[b * k_len_stride]} - q_len + (q - q0);
}

// The local block of a query at `pos`: the block holding it, 0 for pos <= 0. The row keeps it
// last; the blocks before it are its candidates.
__device__ __forceinline__ int local_block(std::int64_t pos) {
  return static_cast<int>(pos <= 0 ? 0 : min(pos / kBlockSize, std::int64_t{INT32_MAX - 1}));
}

// The n <= K shortcut, written by the row's `width` lanes (lane 0..width - 1): a row whose local
// block is below k keeps blocks 0..local, then -1. False (nothing written) for a row that must
// be ranked.
__device__ __forceinline__ bool write_short_row(std::int32_t* out, std::int64_t slot_stride, int k, int local, int lane,
                                                int width = 32) {
  if (local >= k) return false;
  for (int s = lane; s < k; s += width) out[s * slot_stride] = s <= local ? s : -1;
  return true;
}

constexpr unsigned kAll = 0xffffffffu;
constexpr int kCached = 2;  // groups whose keys pass 1 keeps in registers for pass 2

// Candidates per step of a row ranked by kWidth lanes: 4 per lane.
template <int kWidth>
inline constexpr int kGroupOf = 4 * kWidth;

// Lanes per row for a selection of `want` keys: a half warp where its 16 lanes hold the list.
constexpr int row_lanes(int want) { return want <= 16 ? 16 : 32; }

// This lane's row's bits of a warp ballot (bit s: the row's lane s).
template <int kWidth>
__device__ __forceinline__ unsigned row_bits(unsigned ballot) {
  if constexpr (kWidth == 32) {
    return ballot;
  } else {
    const unsigned base = (threadIdx.x % 32) & ~unsigned(kWidth - 1);
    return (ballot >> base) & ((1u << kWidth) - 1u);
  }
}

// Sorts one key per lane across the row's kWidth lanes, descending (lane 0 the largest), or
// ascending.
template <int kWidth, bool kAscending = false>
__device__ __forceinline__ std::uint64_t warp_sort_descending(std::uint64_t x, int lane) {
#pragma unroll
  for (int k = 2; k <= kWidth; k <<= 1) {
#pragma unroll
    for (int j = k >> 1; j > 0; j >>= 1) {
      const std::uint64_t y = __shfl_xor_sync(kAll, x, j, kWidth);
      // In a descending run (lane & k == 0) the lower lane of a pair keeps the larger key. Keys
      // are unique but for the empty 0, so one comparison says which of the two to keep.
      const bool keep_larger = (((lane & j) == 0) == ((lane & k) == 0)) != kAscending;
      x = (y > x) == keep_larger ? y : x;
    }
  }
  return x;
}

// The best kWidth of 2 kWidth keys, descending: `first` sorted descending across the lanes,
// `second` ascending. Their lane-wise maximum is the best half, in a bitonic order, which
// log2(kWidth) half-cleaner stages sort.
template <int kWidth>
__device__ __forceinline__ std::uint64_t warp_merge_best(std::uint64_t first, std::uint64_t second, int lane) {
  std::uint64_t x = max(first, second);
#pragma unroll
  for (int j = kWidth >> 1; j > 0; j >>= 1) {
    const std::uint64_t y = __shfl_xor_sync(kAll, x, j, kWidth);
    x = (y > x) == ((lane & j) == 0) ? y : x;
  }
  return x;
}

// The best `want` (1..kWidth - 1) of n candidates: lane s < want (s = the lane within the row's
// kWidth) returns the s-th best key (0 where fewer than s + 1 candidates exist). keys_of(c0, key)
// gives this lane's four keys of the group of candidates starting at c0 (candidates c0 + 4 lane
// .. + 3; 0 at and past n), and must give the same keys when asked twice. Every lane of the
// warp calls it (with kWidth 16, the two rows' n may differ; a row with nothing to rank passes
// n = 0).
template <int kWidth = 32, class KeysOf>
__device__ __forceinline__ std::uint64_t warp_best(int n, int want, int lane, KeysOf&& keys_of) {
  static_assert(kWidth == 16 || kWidth == 32);
  constexpr int kStep = kGroupOf<kWidth>;
  // The loops with warp collectives run to the longer row's length.
  const int n_warp = kWidth == 32 ? n : max(n, __shfl_xor_sync(kAll, n, 16));
  // Pass 1: this lane's best key (0: no candidate) and, with two seeds, its second best; then
  // the list = the best of those seeds.
  constexpr bool kTwoSeeds = kWidth == 16;
  std::uint64_t cached[kCached][4];
  std::uint64_t own = 0, own2 = 0;
  const auto see = [&](std::uint64_t k) {
    if constexpr (kTwoSeeds) own2 = max(own2, min(own, k));
    own = max(own, k);
  };
#pragma unroll
  for (int j = 0; j < kCached; ++j) {
    keys_of(j * kStep, cached[j]);
#pragma unroll
    for (int e = 0; e < 4; ++e) see(cached[j][e]);
  }
  for (int c0 = kCached * kStep; c0 < n; c0 += kStep) {
    std::uint64_t key[4];
    keys_of(c0, key);
#pragma unroll
    for (int e = 0; e < 4; ++e) see(key[e]);
  }
  std::uint64_t mine = warp_sort_descending<kWidth>(own, lane);
  if constexpr (kTwoSeeds) mine = warp_merge_best<kWidth>(mine, warp_sort_descending<kWidth, true>(own2, lane), lane);
  std::uint64_t bar = __shfl_sync(kAll, mine, want - 1, kWidth);

  // Pass 2: the keys above the bar not yet listed, inserted one at a time (with two rows, each
  // row's next one at a time).
  const auto insert = [&](std::uint64_t(&key)[4]) {
    bool any = false;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (key[e] == own || (kTwoSeeds && key[e] == own2)) key[e] = 0;  // already a seed
      any |= key[e] > bar;
    }
    if (__ballot_sync(kAll, any) == 0u) return;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      unsigned pending = row_bits<kWidth>(__ballot_sync(kAll, key[e] > bar));
      // Warp-uniform trip count: the row with more pending keys sets it.
      while (kWidth == 32 ? pending != 0u : __any_sync(kAll, pending != 0u)) {
        const bool some = pending != 0u;
        const std::uint64_t y = __shfl_sync(kAll, key[e], some ? __ffs(pending) - 1 : 0, kWidth);
        pending &= pending - 1u;
        // Beaten by an earlier insertion, or nothing left in this row: no change (row-uniform).
        const bool go = some && y > bar;
        // y goes to position `at` (the count of better listed keys); the worse ones move down.
        const int at = __popc(row_bits<kWidth>(__ballot_sync(kAll, lane < want && mine > y)));
        const std::uint64_t above = __shfl_up_sync(kAll, mine, 1, kWidth);
        if (go && lane >= at) mine = lane == at ? y : above;
        bar = __shfl_sync(kAll, mine, want - 1, kWidth);
      }
    }
  };
#pragma unroll
  for (int j = 0; j < kCached; ++j)
    if (j * kStep < n_warp) insert(cached[j]);
  for (int c0 = kCached * kStep; c0 < n_warp; c0 += kStep) {
    std::uint64_t key[4];
    keys_of(c0, key);
    insert(key);
  }
  return mine;
}

}  // namespace msa::cuda::topk_select
