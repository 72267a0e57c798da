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

// A warp per tile at a time (route_cta, tile_route.cuh); dynamic shared memory:
// tile_route_smem_bytes(). One instance per size of a lane's share of the tile's ids
// (4, 8 or 16), as registers hold them: the largest alone took 76 registers and left 3 CTAs
// per SM where the previous kernel had 4 (docs/performance.md, step 36). The smaller two fit 4
// CTAs (64 registers); the largest keeps 3 rather than spill.
template <int kLaneEntries>
__global__ void __launch_bounds__(kRouteWarps * 32, kLaneEntries <= 8 ? 4 : 3)
    tile_route_kernel(const TileRouteParams p) {
  extern __shared__ std::int32_t s_route[];
  route_cta<kLaneEntries>(p, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x), s_route);
}

// The standalone compaction (one CTA); the planner compacts in a CTA of a later launch instead.
__global__ void __launch_bounds__(kCompactThreads) tile_route_compact_kernel(const TileRouteParams p) {
  __shared__ typename cub::BlockScan<int, kCompactThreads>::TempStorage scan_tmp;
  compact_route_list<kCompactThreads, kCompactItems>(p.union_tile,
                                                     static_cast<int>(tiles_per_head(p.total_q, p.q_per_tile)), p.h_kv,
                                                     p.union_list, p.union_count, scan_tmp);
}

}  // namespace

std::int64_t tile_route_tiles(int h_kv, std::int64_t total_q, int q_per_tile) {
  return q_per_tile < 1 ? 0 : tiles_per_head(total_q, q_per_tile) * h_kv;
}

int tile_route_ctas(const TileRouteParams& p) {
  MSA_ASSERT(p.topk >= 1 && p.topk <= kTileUnionMaxTopk && p.q_per_tile >= 1 && p.q_per_tile <= kTileUnionMaxQueries &&
             p.q_per_tile * p.topk <= kTileUnionMaxEntries && p.batch >= 1 && p.group >= 1);
  const std::int64_t tiles = tile_route_tiles(p.h_kv, p.total_q, p.q_per_tile);
  MSA_ASSERT(tiles <= INT_MAX / 2);
  return static_cast<int>(std::min<std::int64_t>((tiles + kRouteWarps - 1) / kRouteWarps, kRouteMaxCtas));
}

std::size_t tile_route_smem_bytes(const TileRouteParams& p) {
  return static_cast<std::size_t>(kRouteWarps * route_warp_ints(p.q_per_tile * p.topk)) * sizeof(std::int32_t);
}

void launch_tile_route(const TileRouteParams& p, cudaStream_t stream) {
  const int ctas = tile_route_ctas(p);
  if (ctas == 0) {
    MSA_CUDA_CHECK(cudaMemsetAsync(p.union_count, 0, sizeof(std::int32_t), stream));
    return;
  }
  const std::size_t smem = tile_route_smem_bytes(p);
  const int lane_entries = route_lane_entries(p.q_per_tile * p.topk);
  if (lane_entries == 4)
    tile_route_kernel<4><<<ctas, kRouteWarps * 32, smem, stream>>>(p);
  else if (lane_entries == 8)
    tile_route_kernel<8><<<ctas, kRouteWarps * 32, smem, stream>>>(p);
  else
    tile_route_kernel<16><<<ctas, kRouteWarps * 32, smem, stream>>>(p);
  MSA_CUDA_CHECK(cudaGetLastError());
  tile_route_compact_kernel<<<1, kCompactThreads, 0, stream>>>(p);
  MSA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace msa::cuda
