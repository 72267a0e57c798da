// One warp's selection of a row's best keys (core/topk_key.h's 64-bit keys: unique but for the
// empty 0), shared by the top-k kernel (keys from scores) and the fused indexer's merge (keys
// from per-chunk partial lists). The warp keeps the best `want` keys as one sorted list across
// its lanes: lane s holds the s-th best.
//
// Pass 1 takes each lane's largest key and sorts the 32 lane maxima across the warp (bitonic):
// the list starts as their best `want`, so the bar a candidate must beat is already near its
// final value. Pass 2 takes the row's keys again (the first kCached groups' kept in registers,
// the rest asked for again) and inserts only the keys above the bar that are not already listed
// (a lane's own maximum): a ballot finds them, each goes in with one ballot (its position) and
// one shuffle (the worse keys move down).
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

// The n <= K shortcut, written by the warp's lanes: a row whose local block is below k keeps
// blocks 0..local, then -1. False (nothing written) for a row that must be ranked.
__device__ __forceinline__ bool write_short_row(std::int32_t* out, std::int64_t slot_stride, int k, int local,
                                                int lane) {
  if (local >= k) return false;
  for (int s = lane; s < k; s += 32) out[s * slot_stride] = s <= local ? s : -1;
  return true;
}

constexpr unsigned kAll = 0xffffffffu;
constexpr int kGroup = 128;  // candidates per warp step: 4 per lane
constexpr int kCached = 2;   // groups whose keys pass 1 keeps in registers for pass 2

// Sorts one key per lane across the warp, descending (lane 0 the largest).
__device__ __forceinline__ std::uint64_t warp_sort_descending(std::uint64_t x, int lane) {
#pragma unroll
  for (int k = 2; k <= 32; k <<= 1) {
#pragma unroll
    for (int j = k >> 1; j > 0; j >>= 1) {
      const std::uint64_t y = __shfl_xor_sync(kAll, x, j);
      // In a descending run (lane & k == 0) the lower lane of a pair keeps the larger key. Keys
      // are unique but for the empty 0, so one comparison says which of the two to keep.
      const bool keep_larger = ((lane & j) == 0) == ((lane & k) == 0);
      x = (y > x) == keep_larger ? y : x;
    }
  }
  return x;
}

// The best `want` (1..31) of n candidates: lane s < want returns the s-th best key (0 where
// fewer than s + 1 candidates exist). keys_of(c0, key) gives this lane's four keys of the group
// of candidates starting at c0 (candidates c0 + 4 lane .. + 3; 0 at and past n), and must give
// the same keys when asked twice.
template <class KeysOf>
__device__ __forceinline__ std::uint64_t warp_best(int n, int want, int lane, KeysOf&& keys_of) {
  // Pass 1: this lane's best key (0: no candidate), then the list = the best of the lane maxima.
  std::uint64_t cached[kCached][4];
  std::uint64_t own = 0;
#pragma unroll
  for (int j = 0; j < kCached; ++j) {
    keys_of(j * kGroup, cached[j]);
#pragma unroll
    for (int e = 0; e < 4; ++e) own = max(own, cached[j][e]);
  }
  for (int c0 = kCached * kGroup; c0 < n; c0 += kGroup) {
    std::uint64_t key[4];
    keys_of(c0, key);
#pragma unroll
    for (int e = 0; e < 4; ++e) own = max(own, key[e]);
  }
  std::uint64_t mine = warp_sort_descending(own, lane);
  std::uint64_t bar = __shfl_sync(kAll, mine, want - 1);

  // Pass 2: the keys above the bar not yet listed, inserted one at a time.
  const auto insert = [&](std::uint64_t(&key)[4]) {
    bool any = false;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (key[e] == own) key[e] = 0;  // already in the list
      any |= key[e] > bar;
    }
    if (__ballot_sync(kAll, any) == 0u) return;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      for (unsigned pending = __ballot_sync(kAll, key[e] > bar); pending != 0u; pending &= pending - 1u) {
        const std::uint64_t y = __shfl_sync(kAll, key[e], __ffs(pending) - 1);
        if (y <= bar) continue;  // beaten by an earlier insertion (warp-uniform)
        // y goes to position `at` (the count of better listed keys); the worse ones move down.
        const int at = __popc(__ballot_sync(kAll, lane < want && mine > y));
        const std::uint64_t above = __shfl_up_sync(kAll, mine, 1);
        if (lane >= at) mine = lane == at ? y : above;
        bar = __shfl_sync(kAll, mine, want - 1);
      }
    }
  };
#pragma unroll
  for (int j = 0; j < kCached; ++j)
    if (j * kGroup < n) insert(cached[j]);
  for (int c0 = kCached * kGroup; c0 < n; c0 += kGroup) {
    std::uint64_t key[4];
    keys_of(c0, key);
    insert(key);
  }
  return mine;
}

}  // namespace msa::cuda::topk_select
