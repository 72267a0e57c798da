// The CUDA sparse prefill's workspace: one layout, taken from an Arena in this order (each piece
// 256-byte aligned; docs/layouts.md): the device planner's buffers, o_partial, lse_partial (both
// but with PrefillPath::kTileUnion), staging copies of CPU batch / top-k tensors, and the
// PrefillPath::kAuto tile routing and decode route.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/common/workspace.h"
#include "cuda/plan/k2q_device.h"
#include "cuda/plan/tile_route.h"
#include "cuda/prefill/sm90/tile_union/geometry.h"
#include "msa/options.h"
#include "msa/plan.h"
#include "msa/shapes.h"

namespace msa::cuda {

struct PrefillWorkspace {
  K2qDeviceGeometry k2q_geo;
  K2qDeviceBuffers k2q{};
  void* o_partial = nullptr;             // [topk, total_q, h_q, d] 16-bit (the q dtype)
  float* lse_partial = nullptr;          // [topk, total_q, h_q]
  std::int32_t* cu_seqlens_q = nullptr;  // staging, [B + 1]
  std::int32_t* k_len = nullptr;         // staging, [B] (right after cu_seqlens_q)
  std::int32_t* topk = nullptr;          // staging, [h_kv, total_q, topk]
  // PrefillPath::kAuto routing (cuda/plan/tile_route.h); absent (null, tiles 0) otherwise.
  std::int64_t tiles = 0;               // h_kv * ceil(total_q / tile_union_queries_per_tile(G, topk))
  std::uint8_t* union_tile = nullptr;   // [tiles]
  std::int32_t* union_list = nullptr;   // [tiles]
  std::int32_t* union_count = nullptr;  // [1]
  std::int32_t* combine_list = nullptr;   // [tiles] the other tiles (the combine merges their rows)
  std::int32_t* combine_count = nullptr;  // [1]
  RouteCallCounters* route_counters = nullptr;  // [1] the routing's sums (launch_route_call)
  RouteCallSlot* route_slots = nullptr;         // [kRouteCallSlots] per planner CTA (grid and fused paths)
  // PrefillPath::kAuto: a batch of one request of at most kPrefillDecodeMaxQueries queries runs
  // as a decode step (prefill.cpp); its workspace (decode_workspace), sized for every such
  // problem that this one bounds. Absent (null, 0) otherwise.
  void* decode = nullptr;
  std::size_t decode_bytes = 0;
  std::size_t bytes = 0;  // the whole layout
};

// The layout over `base` (256-byte aligned), or sizes only when base is null. Throws
// msa::Error for problems the CUDA prefill does not support (through k2q_device_sizes).
PrefillWorkspace prefill_workspace(const AttentionShape& shape, const ProblemSize& problem, const Options& options,
                                   void* base);

}  // namespace msa::cuda
