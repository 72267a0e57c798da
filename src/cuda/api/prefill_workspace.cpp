#include "cuda/api/prefill_workspace.h"

#include <algorithm>
#include <climits>
#include <string>

#include "core/check.h"
#include "cuda/api/decode_params.h"
#include "cuda/plan/tile_route.h"
#include "cuda/prefill/sm90/tile_union/geometry.h"

namespace msa::cuda {

PrefillWorkspace prefill_workspace(const AttentionShape& shape, const ProblemSize& problem, const Options& options,
                                   void* base) {
  Arena arena = base != nullptr ? Arena(base) : Arena();
  PrefillWorkspace w;
  // The automatic item size grows with the problem; the work list is sized for its smallest
  // items at every size, so that the workspace grows with the problem too (a caller sizes it
  // once, for its largest).
  const int q_per_item = plan_q_per_item(shape, problem.total_q, options.q_per_item);
  const int capacity_q_per_item = options.q_per_item >= 1 ? q_per_item : plan_q_per_item(shape, 0, 0);
  // The planner's sizes also check the problem's limits (docs/numerics.md), on every path.
  w.k2q_geo = k2q_device_sizes(shape.h_kv, shape.topk, q_per_item, problem, capacity_q_per_item).geo;
  // PrefillPath::kTileUnion never plans on the device and writes every row final: no planner
  // arrays and no partials (their pointers stay null; the tile-union kernel's TMA takes none).
  if (options.prefill_path != PrefillPath::kTileUnion) {
    w.k2q = k2q_device_layout(w.k2q_geo, arena);
    const auto rows = static_cast<std::size_t>(shape.topk) * static_cast<std::size_t>(problem.total_q) *
                      static_cast<std::size_t>(shape.h_q);
    w.o_partial = arena.take_bytes(rows * static_cast<std::size_t>(shape.d) * 2);
    w.lse_partial = arena.take<float>(rows);
  }
  w.cu_seqlens_q = arena.take<std::int32_t>(static_cast<std::size_t>(2 * problem.batch + 1));
  w.k_len = w.cu_seqlens_q != nullptr ? w.cu_seqlens_q + problem.batch + 1 : nullptr;
  w.topk = arena.take<std::int32_t>(static_cast<std::size_t>(shape.h_kv) * static_cast<std::size_t>(problem.total_q) *
                                    static_cast<std::size_t>(shape.topk));
  if (options.prefill_path == PrefillPath::kAuto) {
    w.tiles = tile_route_tiles(shape.h_kv, problem.total_q, tile_union_queries_per_tile(shape.group(), shape.topk));
    MSA_REQUIRE(w.tiles <= INT32_MAX / 2, "total_q", std::to_string(problem.total_q),
                "PrefillPath::kAuto numbers (KV head, query tile) pairs in 32 bits: h_kv * ceil(total_q / " +
                    std::to_string(tile_union_queries_per_tile(shape.group(), shape.topk)) + ") must be < 2^30");
    w.union_tile = arena.take<std::uint8_t>(static_cast<std::size_t>(w.tiles));
    w.union_list = arena.take<std::int32_t>(static_cast<std::size_t>(w.tiles));
    w.union_count = arena.take<std::int32_t>(1);
    w.combine_list = arena.take<std::int32_t>(static_cast<std::size_t>(w.tiles));
    w.combine_count = arena.take<std::int32_t>(1);
    w.route_counters = arena.take<RouteCallCounters>(1);
    w.route_slots = arena.take<RouteCallSlot>(static_cast<std::size_t>(kRouteCallSlots));
    // The decode route's partials (decode_workspace) at their most: kDecodeMaxSplits splits of
    // every row of up to kPrefillDecodeMaxQueries queries, so that every problem this one bounds
    // fits, whatever its split. A closed form: the decode's own sizing took 3.4 us of host time
    // at every plan.
    if (problem.batch >= 1) {
      const auto rows = static_cast<std::size_t>(kDecodeMaxSplits) *
                        static_cast<std::size_t>(std::min<std::int64_t>(kPrefillDecodeMaxQueries, problem.total_q)) *
                        static_cast<std::size_t>(shape.h_q);
      w.decode_bytes = Arena::round_up(rows * static_cast<std::size_t>(shape.d) * 2) + Arena::round_up(rows * 4);
      w.decode = arena.take_bytes(w.decode_bytes);
    }
  }
  w.bytes = arena.bytes();
  return w;
}

}  // namespace msa::cuda
