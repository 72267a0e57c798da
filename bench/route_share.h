// What PrefillPath::kAuto does with a workload: the share of the tile-union kernel's tiles
// that the planner's rule routes to it (the rule's CPU twin, core/tile_route.h), or all of them
// where the routing's cost model sends every tile there without a plan (plan_free_queries_per_tile).
#pragma once

#include <cstdint>

#include "bench/workload.h"

namespace msa::bench {

// Routed tiles / all (KV head, query tile) pairs, in [0, 1], for a plan from device batch
// tensors with the bound max_k_len; 0 when there is no query.
double union_tile_share(const Workload& w, std::int64_t max_k_len);

}  // namespace msa::bench
