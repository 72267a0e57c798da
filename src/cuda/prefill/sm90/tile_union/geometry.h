// The tile of the tile-union kernel, on the host and the device: a tile is up to
// kTileUnionMaxQueries consecutive packed queries of one KV head whose G heads fill the 128-row M
// tile. The planner's routing (cuda/plan/tile_route.h), the host twins (core/tile_route.h, which
// take q_per_tile as a parameter) and the tools use these numbers; no CUDA header is needed.
#pragma once

#include <cstdint>

#include "core/tile_route.h"

namespace msa::cuda {

inline constexpr int kTileUnionRows = 128;  // the kernel's M tile
// The kernel comes in two widths (prefill/sm90/launch.h): the narrow instances' tiles hold up
// to 32 queries and 512 top-k entries (a membership word per union entry, the builders'
// scratch per entry); the wide instance's (a plan-free prefill at G <= 3) up to 128 queries
// and 2048 entries (4 membership words; its builders mark the chosen blocks in a bitmap over
// the blocks the tile's queries can see, at most kTileUnionMaxVisibleBlocks of them).
inline constexpr int kTileUnionNarrowQueries = 32;  // also a routed tile's: the routing takes a lane per query
inline constexpr int kTileUnionMaxQueries = 128;    // the wide instance's
inline constexpr int kTileUnionMemberWords = kTileUnionMaxQueries / 32;
inline constexpr int kTileUnionMaxEntries = 512;            // distinct union entries of a tile: the union list
inline constexpr int kTileUnionMaxTileEntries = 2048;       // q_per_tile * topk of a wide tile
inline constexpr int kTileUnionMaxVisibleBlocks = 1 << 15;  // a wide tile's visible blocks (its bitmap)
inline constexpr int kTileUnionMaxTopk = 32;

// Queries per tile that fill the M tile at a GQA group (1..16 heads) and top-k, within
// `entries` top-k entries and `max_queries` queries a tile.
constexpr int tile_union_fill_queries(int group, int topk, int entries, int max_queries) {
  const int fill = group <= 1 ? kTileUnionRows : kTileUnionRows / group;
  const int by_entries = entries / (topk < 1 ? 1 : topk);
  const int q = fill < by_entries ? fill : by_entries;
  return q < max_queries ? q : max_queries;
}

// Queries per routed prefill tile (PrefillPath::kAuto with a device plan, whose routing counts
// every tile's union) for a GQA group (1..16 heads) and top-k: as many as fill the M tile,
// within the routing's lanes and the union list (q_per_tile * topk <= 512 bounds any union).
// The union kernel's step costs the same whatever share of the 128 rows a tile fills
// (docs/performance.md, step 31), so at G <= 4 a tile of 32 queries halves the steps of one of
// 16 wherever the union is no larger.
constexpr int tile_union_queries_per_tile(int group, int topk) {
  return tile_union_fill_queries(group, topk, kTileUnionMaxEntries, kTileUnionNarrowQueries);
}
static_assert(tile_union_queries_per_tile(16, 16) == 8 && tile_union_queries_per_tile(8, 32) == 16 &&
              tile_union_queries_per_tile(4, 16) == 32 && tile_union_queries_per_tile(4, 32) == 16 &&
              tile_union_queries_per_tile(1, 16) == 32 && tile_union_queries_per_tile(6, 16) == 21 &&
              tile_union_queries_per_tile(16, 32) == 8);

// Queries per tile of a call with no device plan (every tile on the union kernel): as many as
// fill the M tile, up to 128 (G = 1) and 2048 top-k entries, where that is more than the narrow
// instance holds (kTileUnionNarrowQueries): the wide instance's tiles. Their union may then
// exceed the list: such a call takes these tiles only where every tile's union bound (its
// queries' causally visible blocks, union_only_batch's bound) fits kTileUnionMaxEntries and every
// tile's visible blocks fit kTileUnionMaxVisibleBlocks (wide_tiles_fit). That is G <= 3; elsewhere
// the routed tiles, whose top-k entries fit the narrow list (at G = 4..7 and a top-k past 512 / M
// tile queries, fewer queries than fill the M tile).
constexpr int tile_union_free_queries(int group, int topk) {
  const int wide = tile_union_fill_queries(group, topk, kTileUnionMaxTileEntries, kTileUnionMaxQueries);
  return wide > kTileUnionNarrowQueries ? wide : tile_union_queries_per_tile(group, topk);
}
static_assert(tile_union_free_queries(1, 16) == 128 && tile_union_free_queries(2, 16) == 64 &&
              tile_union_free_queries(3, 16) == 42 && tile_union_free_queries(4, 16) == 32 &&
              tile_union_free_queries(16, 16) == 8 && tile_union_free_queries(1, 32) == 64 &&
              tile_union_free_queries(8, 32) == 16 && tile_union_free_queries(3, 32) == 42 &&
              tile_union_free_queries(4, 31) == 16 && tile_union_free_queries(5, 32) == 16 &&
              tile_union_free_queries(7, 29) == 17);

// Whether the tile-union kernel's instances hold tiles of q_per_tile queries at a GQA group and
// top-k: the narrow one up to kTileUnionNarrowQueries queries and kTileUnionMaxEntries top-k
// entries (the launch's invariant), the wide one (more queries) up to kTileUnionMaxQueries
// queries and kTileUnionMaxTileEntries entries; either within the M tile's rows.
constexpr bool tile_union_tile_fits(int q_per_tile, int group, int topk) {
  const bool wide = q_per_tile > kTileUnionNarrowQueries;
  return q_per_tile >= 1 && q_per_tile <= (wide ? kTileUnionMaxQueries : kTileUnionNarrowQueries) &&
         q_per_tile * topk <= (wide ? kTileUnionMaxTileEntries : kTileUnionMaxEntries) &&
         q_per_tile * group <= kTileUnionRows;
}

// Whether every wide tile of q_per_tile queries fits the wide instance: its visible blocks
// within the bitmap (the union's own bound, kTileUnionMaxEntries, is the caller's).
inline bool wide_tiles_fit(const std::int32_t* cu_seqlens_q, const std::int32_t* k_len, std::int64_t batch,
                           std::int64_t total_q, std::int64_t max_k_len, int q_per_tile) {
  return tile_unions_fit(cu_seqlens_q, k_len, batch, total_q, max_k_len, kAnyTopk, q_per_tile,
                         kTileUnionMaxVisibleBlocks);
}

// PrefillPath::kAuto runs a call of one request of 1..kPrefillDecodeMaxQueries queries (the
// decode's largest Q) on more than kPrefillDecodeMinBlocks blocks (max_k_len: the plan's bound),
// whose top-k rows the kernel can read, as a decode step of Q = total_q (cuda/api/prefill.cpp):
// the decode splits each KV head's union over the GPU, where the plan-free tiles, one a KV head,
// would each stream every block alone. On up to 4 blocks those tiles were as fast or 1-5 us
// faster than the split and its combine (docs/performance.md, step 68). Host-known sizes only.
inline constexpr int kPrefillDecodeMaxQueries = 16;
inline constexpr int kPrefillDecodeMinBlocks = 4;
constexpr bool prefill_as_decode(std::int64_t batch, std::int64_t total_q, std::int64_t max_k_len) {
  return batch == 1 && total_q >= 1 && total_q <= kPrefillDecodeMaxQueries &&
         max_k_len > std::int64_t{kPrefillDecodeMinBlocks} * kBlockSize;
}

// PrefillPath::kAuto runs a call of two or more requests with 1..kPrefillSplitUnionMaxQueries
// queries in all, on more than kPrefillDecodeMinBlocks blocks (the plan's bound), without a
// plan: the union kernel's routed tiles (tile_union_queries_per_tile), each split over its union
// as the decode splits a pair, and the combine merging every row's splits
// (cuda/api/prefill.cpp). Host-known sizes only.
inline constexpr int kPrefillSplitUnionMaxQueries = 16;
constexpr bool prefill_split_union(std::int64_t batch, std::int64_t total_q, std::int64_t max_k_len) {
  return batch >= 2 && total_q >= 1 && total_q <= kPrefillSplitUnionMaxQueries &&
         max_k_len > std::int64_t{kPrefillDecodeMinBlocks} * kBlockSize;
}

// The same split route for a call of kPrefillSplitUnionMaxQueries + 1 ..
// kPrefillSplitUnionWideMaxQueries queries (any batch) on more than kPrefillDecodeMinBlocks
// blocks, where it is expected to cost less than the path the call would take otherwise:
// - a call that would plan (free_q = 0, plan_free_queries_per_tile's answer): where the cost
//   model finds the split tiles no dearer than the block-major call and its plan
//   (split_union_batch, core/tile_route.h; a request's tiles read its blocks again where it has
//   many queries on few blocks);
// - a plan-free call (free_q > 0): where its tiles are the routed ones (free_q, G >= 4) and
//   fewer than a wave of CTAs, so that the split (splits >= 2, the count the route would take)
//   spreads the same tiles' unions over more SMs.
// Measured to 1024 queries (docs/performance.md, step 69). Host-known sizes only (a null
// cu_seqlens_q / k_len: a device batch).
inline constexpr int kPrefillSplitUnionWideMaxQueries = 1024;
inline bool prefill_split_wide(const std::int32_t* cu_seqlens_q, const std::int32_t* k_len, std::int64_t batch,
                               std::int64_t total_q, std::int64_t max_k_len, int h_kv, int h_q, int d, int topk,
                               int free_q, int splits) {
  if (total_q <= kPrefillSplitUnionMaxQueries || total_q > kPrefillSplitUnionWideMaxQueries ||
      max_k_len <= std::int64_t{kPrefillDecodeMinBlocks} * kBlockSize || h_kv < 1 || h_q < h_kv)
    return false;
  const int routed = tile_union_queries_per_tile(h_q / h_kv, topk);
  if (free_q > 0) return free_q == routed && splits >= 2;
  return split_union_batch(cu_seqlens_q, k_len, batch, total_q, max_k_len, h_kv, h_q, d, topk, routed, splits);
}

// PrefillPath::kAuto without a device plan (every tile on the union kernel): the queries per
// tile of such a call, or 0 when the call is routed instead. Tiles of tile_union_free_queries
// where the cost model takes them and every tile's union fits the list, else the routed tiles'
// size where the cost model takes that (union_only_batch; a null cu_seqlens_q / k_len: a
// device batch, taken at max_k_len).
inline int plan_free_queries_per_tile(const std::int32_t* cu_seqlens_q, const std::int32_t* k_len, std::int64_t batch,
                                      std::int64_t total_q, std::int64_t max_k_len, int h_kv, int group, int topk) {
  const int routed = tile_union_queries_per_tile(group, topk), free = tile_union_free_queries(group, topk);
  if (free > routed &&
      union_only_batch(cu_seqlens_q, k_len, batch, total_q, max_k_len, h_kv, group, topk, free, routed,
                       kTileUnionMaxEntries) &&
      wide_tiles_fit(cu_seqlens_q, k_len, batch, total_q, max_k_len, free))
    return free;
  return union_only_batch(cu_seqlens_q, k_len, batch, total_q, max_k_len, h_kv, group, topk, routed) ? routed : 0;
}

// PrefillPath::kTileUnion (every tile on the union kernel, forced): tiles of
// tile_union_free_queries where every tile's union fits the list, else the routed tiles' size.
inline int forced_union_queries_per_tile(const std::int32_t* cu_seqlens_q, const std::int32_t* k_len,
                                         std::int64_t batch, std::int64_t total_q, std::int64_t max_k_len, int group,
                                         int topk) {
  const int routed = tile_union_queries_per_tile(group, topk), free = tile_union_free_queries(group, topk);
  return free > routed &&
                 tile_unions_fit(cu_seqlens_q, k_len, batch, total_q, max_k_len, topk, free, kTileUnionMaxEntries) &&
                 wide_tiles_fit(cu_seqlens_q, k_len, batch, total_q, max_k_len, free)
             ? free
             : routed;
}

// The FP8 decode's ways (tile_union/warp_mma.cuh): a tile of at most kDecodeWayRows rows shares
// each 16-row group's blocks among the spare warps, one way per kDecodeWayEntries union entries
// of its split at most. decode_geometry launches the kernel with ways only where some split can
// hold two ways' entries: with one way it ran small steps up to 6% slower than the kernel
// without; and only up to 32 rows: tiles of 64 (Q = 4, G = 16) gained nothing from two ways a
// group and lost 4% at B = 16 (docs/performance.md step 53).
inline constexpr int kDecodeWayRows = 32;
inline constexpr int kDecodeWayEntries = 4;
// Whether tiles of `rows` rows whose pairs hold at most `entries` union entries, in `splits`
// splits, can take two ways or more.
constexpr bool tile_union_decode_ways(std::int64_t rows, std::int64_t entries, int splits) {
  return rows <= kDecodeWayRows && (entries + splits - 1) / splits >= 2 * kDecodeWayEntries;
}
static_assert(tile_union_decode_ways(16, 16, 1) && tile_union_decode_ways(16, 16, 2) &&
              !tile_union_decode_ways(16, 16, 3) && !tile_union_decode_ways(64, 64, 1) &&
              !tile_union_decode_ways(16, 7, 1));

// The FP8 decode's kernel without ways that brings each tile's Q through the K/V ring (a
// sixth stage in the Q buffer's place, O stored from registers; warp_mma.cuh) where a tile's
// choices repeat blocks of its union, so that the warps' arithmetic, not the copy, bounds the
// step. The plan knows only a bound on seq_len, so it counts the repeats that `queries` queries
// of one request would make choosing `k` of `blocks` blocks each at random: their choices
// (queries x k) against their expected union, blocks x (1 - (1 - k / blocks)^queries). Real
// choices cluster, so they repeat more. The ring kernel is taken from 1.25 choices per expected
// block: at Q = 8 (one request a tile, G = 16) up to L = 31.5k. Measured (docs/performance.md
// steps 55 and 56): 2-9% faster from L = 1k to 30k (1.27 choices a block there), even at 50k
// (1.15), and 5-7% slower where CTAs run several tiles near copy bandwidth (B = 128 at L = 100k
// / 200k, Q = 4 / 8: 1.02-1.06).
constexpr bool tile_union_decode_q_in_ring(int queries, std::int64_t k, std::int64_t blocks) {
  if (queries < 1 || k < 1 || blocks < k) return false;
  double miss = 1.0;  // the chance that a query's choices miss a given block, to the power queries
  for (int q = 0; q < queries; ++q) miss *= 1.0 - static_cast<double>(k) / static_cast<double>(blocks);
  const double expected = static_cast<double>(blocks) * (1.0 - miss);
  return static_cast<double>(queries) * static_cast<double>(k) >= 1.25 * expected;
}
static_assert(tile_union_decode_q_in_ring(8, 16, 79) && tile_union_decode_q_in_ring(8, 8, 8) &&
              tile_union_decode_q_in_ring(8, 16, 234) && !tile_union_decode_q_in_ring(8, 16, 250) &&
              !tile_union_decode_q_in_ring(8, 16, 1563) && !tile_union_decode_q_in_ring(1, 16, 79) &&
              !tile_union_decode_q_in_ring(4, 16, 782) && !tile_union_decode_q_in_ring(0, 16, 79) &&
              !tile_union_decode_q_in_ring(8, 16, 8));

// Queries per decode tile: at most 16 whatever the top-k (a decode request brings 1-16 queries;
// the decode's tiles and splits were measured with these, docs/performance.md, step 14e).
constexpr int tile_union_decode_queries(int group) { return tile_union_queries_per_tile(group, kTileUnionMaxTopk); }
static_assert(tile_union_decode_queries(1) == 16 && tile_union_decode_queries(8) == 16 &&
              tile_union_decode_queries(16) == 8 && tile_union_decode_queries(6) == 16);

}  // namespace msa::cuda
