// How the CUDA prefill runs a call: which kernels, with or without a device plan. plan() decides
// it on the host (cuda/api/prefill.cpp) and run() follows it; `msa run` and the tests ask the
// same function which route a call takes, so that their oracles follow the library's choice.
#pragma once

#include <cstdint>
#include <vector>

#include "msa/prefill.h"

namespace msa::cuda {

enum class PrefillRoute {
  kBlockMajor,  // the device plan, every row on the block-major kernel, then the combine
                // (PrefillPath::kBlockMajor; kAuto with no query, top-k rows the union kernel
                // cannot read, or fewer tiles than routing may pay for: routing_may_pay)
  kRouted,      // kAuto: the device plan routes each tile to the cheaper kernel (tile_route.h)
                // and leaves the union tiles' rows out; both kernels, then the combine
  kPlanFree,    // every tile on the tile-union kernel, no plan (kTileUnion, or kAuto where the
                // cost model takes it: plan_free_queries_per_tile)
  kDecode,      // one request of 1..16 queries run as a decode step (prefill_as_decode)
  kSplit,       // the union kernel's routed tiles each split over their union, then the combine
                // (prefill_split_union, prefill_split_wide); no plan
};

struct PrefillRouteChoice {
  PrefillRoute route = PrefillRoute::kBlockMajor;
  int q_per_tile = 0;  // the union kernel's queries per tile: kPlanFree's tiles, else the routed
                       // tiles' size (tile_union_queries_per_tile)
  int splits = 1;      // kSplit: tiles per (KV head, query tile) pair (prefill_union_splits)
};

// The route of a call of `batch` requests and total_q queries on at most max_k_len keys, for
// `path` (Options::prefill_path). union_readable: the top-k rows have a contiguous last dim (or
// are host rows, staged so), which the union kernel needs. cu_seqlens_q / k_len: the host batch,
// or null for a device batch (then taken at its bound, max_k_len). Host-known sizes only: the
// same answer at plan() and wherever the route is checked.
PrefillRouteChoice choose_prefill_route(const AttentionShape& shape, PrefillPath path, bool union_readable,
                                        const std::int32_t* cu_seqlens_q, const std::int32_t* k_len, std::int64_t batch,
                                        std::int64_t total_q, std::int64_t max_k_len);

// The (KV head, query tile) pairs the route gives the tile-union kernel, as flags over h_kv *
// tiles_per_head(total_q, tile_union_queries_per_tile(...)) tiles, the planner's: every tile
// where every_tile_on_union, route_call_host's where kRouted, none (empty) otherwise. Host
// rows: topk [total_q, h_kv, topk], cu_seqlens_q [batch + 1], k_len [batch]. For the oracles of
// `msa run`, the bench's union column and the tests.
std::vector<std::uint8_t> union_tile_flags(const PrefillRouteChoice& choice, const AttentionShape& shape,
                                           const std::int32_t* topk, const std::int32_t* cu_seqlens_q,
                                           const std::int32_t* k_len, std::int64_t batch, std::int64_t total_q);

// Whether the route runs every tile on the union kernel without a device plan (plan() builds
// nothing; plan_snapshot() rebuilds the plan on the host with every tile routed).
constexpr bool every_tile_on_union(PrefillRoute r) {
  return r == PrefillRoute::kPlanFree || r == PrefillRoute::kDecode || r == PrefillRoute::kSplit;
}

}  // namespace msa::cuda
