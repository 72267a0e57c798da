// What the CUDA prefill does with a workload on a path: the share of the (KV head, query tile)
// pairs that run on the tile-union kernel, from the route plan() takes (cuda::choose_prefill_route)
// and, where it routes tile by tile, the routing rule's CPU twin (core/tile_route.h).
#pragma once

#include <cstdint>

#include "bench/workload.h"
#include "msa/prefill.h"

namespace msa::bench {

// Tiles on the tile-union kernel / all (KV head, query tile) pairs, in [0, 1], for a plan from
// device batch tensors with the bound max_k_len: 1 where every tile runs there (kTileUnion, the
// plan-free tiles, a decode step, the split small calls), 0 on the block-major path alone, the
// routed share otherwise; 0 when there is no query. CUDA builds only.
double union_tile_share(const Workload& w, std::int64_t max_k_len, PrefillPath path);

}  // namespace msa::bench
