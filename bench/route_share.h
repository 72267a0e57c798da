// What PrefillPath::kAuto does with a workload: the share of the tile-union kernel's tiles
// that the planner's rule routes to it (the rule's CPU twin, core/tile_route.h).
#pragma once

#include "bench/workload.h"

namespace msa::bench {

// Routed tiles / all (KV head, query tile) pairs, in [0, 1]; 0 when there is no query.
double union_tile_share(const Workload& w);

}  // namespace msa::bench
