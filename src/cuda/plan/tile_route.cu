#include "cuda/plan/tile_route.h"

#include <algorithm>
#include <climits>

#include "core/check.h"
#include "core/tile_route.h"
#include "cuda/common/check.h"
#include "cuda/common/per_device.h"
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

void launch_route_call(const TileRouteParams& p, RouteCallCounters* counters, cudaStream_t stream) {
  MSA_ASSERT(counters != nullptr && p.union_tile != nullptr && p.union_list != nullptr && p.union_count != nullptr &&
             p.combine_list != nullptr && p.combine_count != nullptr);
  const int ctas = tile_route_ctas(p);
  if (ctas <= 0) return;
  const std::size_t smem = tile_route_smem_bytes(p);
  // Tables of the largest tiles (top-k 32 at G <= 8) take the whole default 48 KB beside the
  // kernel's own 1.2 KB: the dynamic limit is raised once per device, only for them (as the
  // planner's grants, so that smaller plans never set an attribute, captured or not).
  if (smem + 2048 > 48 * 1024) {
    static PerDevice<bool> raised;
    raised.get([] {
      const auto raise = [](auto kernel) {
        MSA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(route_cta_smem_bytes(kTileUnionMaxEntries))));
      };
      raise(route_call_kernel<4>);
      raise(route_call_kernel<8>);
      raise(route_call_kernel<16>);
      return true;
    });
  }
  const dim3 grid(static_cast<unsigned>(ctas)), block(kRouteWarps * 32);
  switch (route_lane_entries(p.q_per_tile * p.topk)) {
    case 4:
      route_call_kernel<4><<<grid, block, smem, stream>>>(p, counters);
      break;
    case 8:
      route_call_kernel<8><<<grid, block, smem, stream>>>(p, counters);
      break;
    default:
      route_call_kernel<16><<<grid, block, smem, stream>>>(p, counters);
  }
  MSA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace msa::cuda
