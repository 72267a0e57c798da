#include "cuda/api/prefill_route.h"

#include "core/tile_route.h"
#include "cuda/api/decode_params.h"
#include "cuda/prefill/sm90/tile_union/geometry.h"

namespace msa::cuda {

PrefillRouteChoice choose_prefill_route(const AttentionShape& shape, PrefillPath path, bool union_readable,
                                        const std::int32_t* cu_seqlens_q, const std::int32_t* k_len, std::int64_t batch,
                                        std::int64_t total_q, std::int64_t max_k_len) {
  const int group = shape.group();
  PrefillRouteChoice c;
  c.q_per_tile = tile_union_queries_per_tile(group, shape.topk);
  if (path == PrefillPath::kTileUnion) {
    c.route = PrefillRoute::kPlanFree;
    c.q_per_tile = forced_union_queries_per_tile(cu_seqlens_q, k_len, batch, total_q, max_k_len, group, shape.topk);
    return c;
  }
  if (path != PrefillPath::kAuto || !union_readable) return c;  // kBlockMajor
  if (prefill_as_decode(batch, total_q, max_k_len)) {
    c.route = PrefillRoute::kDecode;
    return c;
  }
  const int splits = prefill_union_splits(shape.h_kv, total_q, c.q_per_tile, max_k_len, shape.topk);
  if (prefill_split_union(batch, total_q, max_k_len)) {
    c.route = PrefillRoute::kSplit;
    c.splits = splits;
    return c;
  }
  const int free_q = total_q > 0 ? plan_free_queries_per_tile(cu_seqlens_q, k_len, batch, total_q, max_k_len,
                                                              shape.h_kv, group, shape.topk)
                                 : 0;
  if (prefill_split_wide(cu_seqlens_q, k_len, batch, total_q, max_k_len, shape.h_kv, shape.h_q, shape.d, shape.topk,
                         free_q, splits)) {
    c.route = PrefillRoute::kSplit;
    c.splits = splits;
  } else if (free_q > 0) {
    c.route = PrefillRoute::kPlanFree;
    c.q_per_tile = free_q;
  } else if (total_q > 0 && routing_may_pay(shape.h_kv * tiles_per_head(total_q, c.q_per_tile))) {
    c.route = PrefillRoute::kRouted;
  }
  return c;
}

std::vector<std::uint8_t> union_tile_flags(const PrefillRouteChoice& choice, const AttentionShape& shape,
                                           const std::int32_t* topk, const std::int32_t* cu_seqlens_q,
                                           const std::int32_t* k_len, std::int64_t batch, std::int64_t total_q) {
  const int q_per_tile = tile_union_queries_per_tile(shape.group(), shape.topk);
  if (every_tile_on_union(choice.route))
    return std::vector<std::uint8_t>(static_cast<std::size_t>(shape.h_kv * tiles_per_head(total_q, q_per_tile)), 1);
  if (choice.route != PrefillRoute::kRouted) return {};
  return route_call_host(topk, cu_seqlens_q, k_len, static_cast<int>(batch), shape.h_kv, shape.group(), total_q,
                         shape.topk, q_per_tile);
}

}  // namespace msa::cuda
