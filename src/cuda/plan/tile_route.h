// The planner's per-tile routing for PrefillPath::kAuto (rule and CPU twin: core/tile_route.h):
// one warp per (KV head, query tile) of the tile-union kernel counts the tile's union and its
// rows' edges and flags the tile when union_path_wins; the flagged tiles are then compacted,
// in rank order (tile_of_rank: heaviest first), into the list the tile-union kernel walks
// (device code: tile_route.cuh). The k2q planner runs it in its own launches
// (K2qDeviceInputs::route): capturable in a CUDA graph, no host synchronisation.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace msa::cuda {

// The candidates' sums of a routing launched before the planner (launch_route_call), zeroed
// before it: the per-tile rule's tiles, their unions and their edges, and the CTAs done.
struct RouteCallCounters {
  unsigned long long tiles;
  unsigned long long unions;
  unsigned long long edges;
  unsigned int done;
};

// A cooperative planner CTA's sums over the candidates it routed (the grid and fused paths'
// routing decided for the call): every CTA of the launch writes its own slot, and every CTA
// reads them all after a grid barrier.
struct RouteCallSlot {
  unsigned long long tiles;
  unsigned long long unions;
  unsigned long long edges;
};
inline constexpr int kRouteCallSlots = 129;  // the grid and fused paths' most CTAs (k2q::kGridMaxTasks + 1)

struct TileRouteParams {
  // inputs
  const std::int32_t* ids;  // [h_kv, total_q, topk], last dim contiguous
  std::int64_t stride_topk_head;
  std::int64_t stride_topk_token;
  const std::int32_t* cu_seqlens_q;  // [batch + 1]
  const std::int32_t* k_len;         // [batch]
  int batch;                         // >= 1
  int h_kv;
  std::int64_t total_q;
  int topk;        // 1..32
  int q_per_tile;  // 1..32 (kTileUnionNarrowQueries)
  int group;       // h_q / h_kv: the cost model of union_path_wins (core/tile_route.h)
  // outputs
  std::uint8_t* union_tile;   // [tiles] 1: the tile-union kernel takes the tile
  std::int32_t* union_list;   // [tiles] the flagged tiles in rank order; first *union_count
  std::int32_t* union_count;  // [1]
  // may be null: the other tiles in rank order (whose rows the combine merges), first
  // *combine_count
  std::int32_t* combine_list;   // [tiles]
  std::int32_t* combine_count;  // [1]
  // The routing decided for the call (route_call_pays, core/tile_route.h), or both null: the
  // per-tile rule alone. Decided whatever the call's size; plan() sets them only within
  // route_call_applies. The k2q planner's grid and fused paths sum their CTAs' candidates in
  // call_slots and decide after a grid barrier; its other paths route first in
  // launch_route_call, with call_counters (build_k2q_device).
  RouteCallSlot* call_slots;         // [kRouteCallSlots]
  RouteCallCounters* call_counters;  // [1]
};

// tiles = h_kv * tiles_per_head(total_q, q_per_tile), < 2^31.
std::int64_t tile_route_tiles(int h_kv, std::int64_t total_q, int q_per_tile);
// The routing's CTAs (kRouteWarps warps each, a tile per warp at a time; 0 when there is no
// tile) and their dynamic shared memory, after checking p's geometry (the operator layer
// validated it). The k2q planner routes in CTAs of its row map's launch (k2q_kernels.cuh).
int tile_route_ctas(const TileRouteParams& p);
std::size_t tile_route_smem_bytes(const TileRouteParams& p);

// The routing decided for the call (route_call_pays, core/tile_route.h) as a launch of its own,
// before the planner: every tile's flag by the per-tile rule, then, in the last CTA to finish,
// every flag cleared where the call does not gain by them, and both lists (union_list,
// combine_list; the latter required). counters: zeroed on the stream before (a memset). The
// planner then takes the flags (K2qDeviceInputs::union_tile). Nothing when there is no tile.
void launch_route_call(const TileRouteParams& p, RouteCallCounters* counters, cudaStream_t stream);

}  // namespace msa::cuda
