#include "cuda/plan/tile_route.h"

#include <algorithm>
#include <climits>

#include "core/check.h"
#include "core/tile_route.h"
#include "cuda/plan/tile_route.cuh"

namespace msa::cuda {

std::int64_t tile_route_tiles(int h_kv, std::int64_t total_q, int q_per_tile) {
  return q_per_tile < 1 ? 0 : tiles_per_head(total_q, q_per_tile) * h_kv;
}

int tile_route_ctas(const TileRouteParams& p) {
  MSA_ASSERT(p.topk >= 1 && p.topk <= kTileUnionMaxTopk && p.q_per_tile >= 1 &&
             p.q_per_tile <= kTileUnionNarrowQueries && p.q_per_tile * p.topk <= kTileUnionMaxEntries && p.batch >= 1 &&
             p.group >= 1);
  const std::int64_t tiles = tile_route_tiles(p.h_kv, p.total_q, p.q_per_tile);
  MSA_ASSERT(tiles <= INT_MAX / 2);
  return static_cast<int>(std::min<std::int64_t>((tiles + kRouteWarps - 1) / kRouteWarps, kRouteMaxCtas));
}

std::size_t tile_route_smem_bytes(const TileRouteParams& p) { return route_cta_smem_bytes(p.q_per_tile * p.topk); }

}  // namespace msa::cuda
