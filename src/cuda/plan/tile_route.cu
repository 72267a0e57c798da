#include "cuda/plan/tile_route.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>

#include "core/check.h"
#include "core/tile_route.h"
#include "cuda/common/check.h"
#include "cuda/plan/tile_route.cuh"

namespace msa::cuda {

namespace {

constexpr int kCompactThreads = 1024;
constexpr int kCompactItems = 8;

// A warp per tile at a time (tile_route.cuh); dynamic shared memory: route_warp_ints(
// q_per_tile * topk) ints per warp. One instance per size of a lane's share of the tile's ids
// (4, 8 or 16), as registers hold them: the largest alone took 76 registers and left 3 CTAs
// per SM where the previous kernel had 4 (docs/performance.md, step 36). The smaller two fit 4
// CTAs (64 registers); the largest keeps 3 rather than spill.
template <int kLaneEntries>
__global__ void __launch_bounds__(kRouteWarps * 32, kLaneEntries <= 8 ? 4 : 3)
    tile_route_kernel(const TileRouteParams p) {
  extern __shared__ std::int32_t s_route[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int entries = p.q_per_tile * p.topk;
  std::int32_t* s_key = s_route + warp * route_warp_ints(entries);
  std::int32_t* s_table = s_key + entries;
  const std::int64_t per_head = tiles_per_head(p.total_q, p.q_per_tile);
  const std::int64_t tiles = per_head * p.h_kv;
  for (std::int64_t tile = std::int64_t(blockIdx.x) * kRouteWarps + warp; tile < tiles;
       tile += std::int64_t(gridDim.x) * kRouteWarps)
    route_tile<kLaneEntries>(p, tile, per_head, lane, s_key, s_table);
}

// The standalone compaction (one CTA); the planner compacts in a CTA of a later launch instead.
__global__ void __launch_bounds__(kCompactThreads) tile_route_compact_kernel(const TileRouteParams p) {
  __shared__ typename cub::BlockScan<int, kCompactThreads>::TempStorage scan_tmp;
  compact_route_list<kCompactThreads, kCompactItems>(p.union_tile,
                                                     static_cast<int>(tiles_per_head(p.total_q, p.q_per_tile)), p.h_kv,
                                                     p.union_list, p.union_count, scan_tmp);
}

// The operator layer validated the problem (prefill_workspace() bounds the tile count).
void check(const TileRouteParams& p) {
  MSA_ASSERT(p.topk >= 1 && p.topk <= kTileUnionMaxTopk && p.q_per_tile >= 1 && p.q_per_tile <= kTileUnionMaxQueries &&
             p.q_per_tile * p.topk <= kTileUnionMaxEntries && p.batch >= 1 && p.group >= 1);
  MSA_ASSERT(tile_route_tiles(p.h_kv, p.total_q, p.q_per_tile) <= INT_MAX / 2);
}

}  // namespace

std::int64_t tile_route_tiles(int h_kv, std::int64_t total_q, int q_per_tile) {
  return q_per_tile < 1 ? 0 : tiles_per_head(total_q, q_per_tile) * h_kv;
}

void launch_tile_route(const TileRouteParams& p, cudaStream_t stream, RouteList list) {
  check(p);
  const std::int64_t tiles = tile_route_tiles(p.h_kv, p.total_q, p.q_per_tile);
  if (tiles == 0) {
    if (list == RouteList::kCompact) MSA_CUDA_CHECK(cudaMemsetAsync(p.union_count, 0, sizeof(std::int32_t), stream));
    return;
  }
  const int entries = p.q_per_tile * p.topk;
  const auto grid = static_cast<unsigned>(std::min<std::int64_t>((tiles + kRouteWarps - 1) / kRouteWarps, 4096));
  const auto smem = static_cast<std::size_t>(kRouteWarps * route_warp_ints(entries)) * sizeof(std::int32_t);
  if (entries <= 4 * 32)
    tile_route_kernel<4><<<grid, kRouteWarps * 32, smem, stream>>>(p);
  else if (entries <= 8 * 32)
    tile_route_kernel<8><<<grid, kRouteWarps * 32, smem, stream>>>(p);
  else
    tile_route_kernel<kTileUnionMaxEntries / 32><<<grid, kRouteWarps * 32, smem, stream>>>(p);
  MSA_CUDA_CHECK(cudaGetLastError());
  if (list == RouteList::kCompact) {
    tile_route_compact_kernel<<<1, kCompactThreads, 0, stream>>>(p);
    MSA_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace msa::cuda
