// One warp's selection of a row's best keys (core/topk_key.h's 64-bit keys: unique but for the
// empty 0), shared by the top-k kernel (warp_best_ranks: candidates are a row's scores, their
// ids their columns) and the fused indexer's merge (warp_best: keys from per-chunk partial
// lists). A row is ranked by kWidth lanes: the whole warp (32), or a half warp (16, two rows side
// by side in one warp's instructions, for `want` <= 16). The lanes keep the best `want` keys as
// one sorted list across them: lane s holds the s-th best.
//
// Pass 1 takes each lane's largest key and sorts the kWidth lane maxima across the lanes
// (bitonic): the list starts as their best `want`, so the bar a candidate must beat is already
// near its final value. A half-warp row seeds the list with each lane's best two keys instead
// (the best kWidth of those 2 kWidth): 16 lane maxima alone left about 9 insertions per row of
// random scores (docs/performance.md, steps 34 and 37). Pass 2 takes the row's keys again (the
// first groups' kept in registers, the rest asked for again) and inserts only the keys above
// the bar that are not a lane's seed (every other key of a lane is below its lowest seed): a
// ballot finds them, each goes in with one ballot (its position) and one shuffle (the worse keys
// move down).
#pragma once

#include <climits>
#include <cstdint>

#include "core/topk_key.h"          // with_id
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
constexpr int kCached = 2;  // groups whose keys warp_best keeps in registers for pass 2

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

// The list that pass 1 leaves: the kWidth lane maxima `own` sorted descending across the row's
// lanes, or, with two seeds (each lane's best two, `own` and `own2`), the best kWidth of those
// 2 kWidth (lane s: the s-th best).
template <int kWidth, bool kTwoSeeds>
__device__ __forceinline__ std::uint64_t seed_list(std::uint64_t own, std::uint64_t own2, int lane) {
  const std::uint64_t mine = warp_sort_descending<kWidth>(own, lane);
  if constexpr (!kTwoSeeds) return mine;
  return warp_merge_best<kWidth>(mine, warp_sort_descending<kWidth, true>(own2, lane), lane);
}

// Pass 2 on one group: inserts the keys a lane flagged (above the bar when pass 2 began, and not
// a seed of the lane), one at a time per row: each goes in with one ballot (its position) and
// one shuffle (the worse keys move down), unless an earlier insertion raised the bar past it.
template <int kWidth>
__device__ __forceinline__ void insert_flagged(const std::uint64_t (&key)[4], const bool (&flag)[4],
                                               std::uint64_t& mine, std::uint64_t& bar, int want, int lane) {
  if (!__any_sync(kAll, flag[0] || flag[1] || flag[2] || flag[3])) return;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    if (!__any_sync(kAll, flag[e])) continue;  // warp-uniform: most groups flag one key or two
    unsigned pending = row_bits<kWidth>(__ballot_sync(kAll, flag[e] && key[e] > bar));
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
}

// The best `want` (1..kWidth - 1) of n candidates given as keys: lane s < want (s = the lane
// within the row's kWidth) returns the s-th best key (0 where fewer than s + 1 candidates exist).
// keys_of(c0, key) gives this lane's four keys of the group of candidates starting at c0
// (candidates c0 + 4 lane .. + 3; 0 at and past n), and must give the same keys when asked
// twice. Every lane of the warp calls it (with kWidth 16, the two rows' n may differ; a row with
// nothing to rank passes n = 0). The fused indexer's merge ranks its partial lists with it.
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
  std::uint64_t mine = seed_list<kWidth, kTwoSeeds>(own, own2, lane);
  std::uint64_t bar = __shfl_sync(kAll, mine, want - 1, kWidth);

  // Pass 2: the keys above the bar that are not a seed. Every key of the lane but its seeds is
  // below its lowest seed, so the flag is bar < key < that seed.
  const std::uint64_t seed_floor = kTwoSeeds ? own2 : own;
  const auto insert = [&](const std::uint64_t(&key)[4]) {
    bool flag[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) flag[e] = key[e] > bar && key[e] < seed_floor;
    insert_flagged<kWidth>(key, flag, mine, bar, want, lane);
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

// warp_best for candidates whose id is their position (candidate c: block c), ranked by 32-bit
// ranks (core/topk_key.h: >= 1; the key is with_id(rank, c)): the top-k kernel's rows of
// scores. load(c0, v) gives this lane's four values of the group at c0 (candidates c0 + 4 lane
// .. + 3; anything at and past n) and rank_of(v) their ranks. A lane meets its candidates in
// increasing id order, so a strictly greater rank is a better key, and pass 1 keeps (rank, id)
// in 32-bit registers instead of 64-bit keys (docs/performance.md, step 38). The ranks of the
// first kCachedRanks candidates (a multiple of 4 kWidth) stay in registers for pass 2; every
// such group's loads are issued before the first is ranked, and groups past the longer row are
// neither loaded nor ranked.
template <int kWidth, int kCachedRanks, class Load, class RankOf>
__device__ __forceinline__ std::uint64_t warp_best_ranks(int n, int want, int lane, Load&& load, RankOf&& rank_of) {
  static_assert(kWidth == 16 || kWidth == 32);
  constexpr int kStep = kGroupOf<kWidth>;
  constexpr int kGroups = kCachedRanks / kStep;
  static_assert(kGroups >= 1 && kGroups * kStep == kCachedRanks);
  constexpr bool kTwoSeeds = kWidth == 16;
  const int n_other = kWidth == 32 ? n : __shfl_xor_sync(kAll, n, 16);
  const int n_warp = max(n, n_other), n_both = min(n, n_other);
  const int c_lane = 4 * lane;
  // This lane's ranks of the group at c0, 0 at and past n (tested only in a group that reaches
  // past either row's end: the test is a fifth of a rank's instructions).
  const auto ranks = [&](int c0, const float(&v)[4], std::uint32_t(&r)[4]) {
    if (c0 + kStep <= n_both) {
#pragma unroll
      for (int e = 0; e < 4; ++e) r[e] = rank_of(v[e]);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) r[e] = c_lane + c0 + e < n ? rank_of(v[e]) : 0u;
    }
  };
  // This lane's best (rank, id) and second best; rank 0 and id -1 (key 0) while none is seen.
  std::uint32_t r1 = 0u, r2 = 0u;
  int c1 = -1, c2 = -1;
  const auto see = [&](std::uint32_t r, int c) {
    const bool first = r > r1;
    if constexpr (kTwoSeeds) {
      const bool second = r > r2;
      r2 = first ? r1 : second ? r : r2;
      c2 = first ? c1 : second ? c : c2;
    }
    r1 = first ? r : r1;
    c1 = first ? c : c1;
  };
  // Pass 1. The cached groups: the first two always (their loads are predicated by n), the
  // others only where the longer row reaches them.
  float v[kGroups][4];
  std::uint32_t cached[kGroups][4];
#pragma unroll
  for (int j = 0; j < kGroups; ++j)
    if (j < 2 || j * kStep < n_warp) load(j * kStep, v[j]);
#pragma unroll
  for (int j = 0; j < kGroups; ++j) {
    if (j < 2 || j * kStep < n_warp) {
      ranks(j * kStep, v[j], cached[j]);
#pragma unroll
      for (int e = 0; e < 4; ++e) see(cached[j][e], c_lane + j * kStep + e);
    }
  }
  for (int c0 = kGroups * kStep; c0 < n; c0 += kStep) {
    float w[4];
    std::uint32_t r[4];
    load(c0, w);
    ranks(c0, w, r);
#pragma unroll
    for (int e = 0; e < 4; ++e) see(r[e], c_lane + c0 + e);
  }
  const std::uint64_t own = topk_key::with_id(r1, c1);
  const std::uint64_t own2 = topk_key::with_id(r2, c2);
  std::uint64_t mine = seed_list<kWidth, kTwoSeeds>(own, own2, lane);
  std::uint64_t bar = __shfl_sync(kAll, mine, want - 1, kWidth);

  // Pass 2 as warp_best's; the floor also keeps out rank 0 (past n), whose keys are <= 2^32 - 1.
  const std::uint64_t floor = max(bar, std::uint64_t{0xffffffffu});
  const std::uint64_t seed_floor = kTwoSeeds ? own2 : own;
  const auto insert = [&](const std::uint32_t(&r)[4], int c0) {
    std::uint64_t key[4];
    bool flag[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      key[e] = topk_key::with_id(r[e], c_lane + c0 + e);
      flag[e] = key[e] > floor && key[e] < seed_floor;
    }
    insert_flagged<kWidth>(key, flag, mine, bar, want, lane);
  };
#pragma unroll
  for (int j = 0; j < kGroups; ++j)
    if (j * kStep < n_warp) insert(cached[j], j * kStep);
  for (int c0 = kGroups * kStep; c0 < n_warp; c0 += kStep) {
    float w[4];
    std::uint32_t r[4];
    load(c0, w);
    ranks(c0, w, r);
    insert(r, c0);
  }
  return mine;
}

}  // namespace msa::cuda::topk_select
