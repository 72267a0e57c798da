// What the device k2q planner's kernels (k2q_kernels.cuh) read and write, and the launch shapes
// they are compiled for. Built by k2q_device.cu from a K2qDeviceGeometry and the caller's buffers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/plan/k2q_device.h"
#include "msa/plan.h"

namespace msa::cuda::k2q {

inline constexpr int kMapThreads = 256;       // row map CTA
inline constexpr int kPrefixWarps = 16;       // unit prefix CTA: warps split the units
inline constexpr int kPrefixBatch = 8;        // counts loaded before they are summed
inline constexpr int kPassBatch = 4;          // top-k passes loaded ahead of their analysis
inline constexpr int kFinalizeThreads = 256;  // row_ptr and work items: one thread per entry
inline constexpr int kTailThreads = 256;      // finish pass
inline constexpr int kTailMaxCtasPerHead = 1024;
inline constexpr int kMaxUnitWarps = 8;    // count/scatter CTA
inline constexpr int kLevelsPerTile = 32;  // unit prefix: one lane per level
static_assert(kLevelsPerTile == 32, "the unit prefix maps the levels of a tile to the lanes of a warp");

// Everything the planner kernels read and write. Shapes in brackets; all counts fit in int32
// (k2q_device_sizes checks), offsets are formed in 64 bits.
struct BuildParams {
  // inputs
  const std::int32_t* cu_seqlens_q;  // [batch + 1]
  const std::int32_t* k_len;         // [batch]
  const std::int32_t* topk_ids;      // [h_kv, total_q, topk], last dim contiguous
  std::int64_t stride_topk_head;
  std::int64_t stride_topk_token;
  const std::uint8_t* union_tile;  // [h_kv, route_per_head] or null: rows of flagged tiles
  int route_q_per_tile;            //   are left out (split count 1, no edge); see TileRoute
  int route_per_head;
  // outputs
  std::int32_t* row_coords;    // [max_rows, 2] (b, block)
  std::int32_t* row_ptr;       // [h_kv, max_rows + 1]
  std::int32_t* q_indices;     // [h_kv, edges_per_head]
  std::int32_t* qsplit;        // [h_kv, edges_per_head] qsplit words (core/plan_encoding.h)
  std::int32_t* split_counts;  // [total_q, h_kv]
  WorkItem* work;              // [work_capacity]
  std::int32_t* work_count;    // [1]
  std::int32_t* total_rows;    // [1]
  // scratch
  std::int32_t* row_of;       // [batch, max_blocks]
  std::int32_t* unit_start;   // [batch + 1]
  std::int32_t* unit_counts;  // [h_kv, max_units, max_blocks]
  K2qRowTotal* row_totals;    // [h_kv, max_rows + 1] edges << 32 | items per row
  K2qRowTotal* row_scan;      // [h_kv, max_rows + 1] flat exclusive scan of row_totals
  // geometry
  int batch;
  int total_q;
  int h_kv;
  int topk;
  int topk_pow2;  // K' = next power of two >= topk (lanes per query)
  int log_topk_pow2;
  int q_per_item;
  int q_per_unit;
  int max_blocks;
  int max_rows;
  int max_units;
  int level_tiles;  // ceil(max_blocks / kLevelsPerTile), at least 1
  int unit_warps;
  int edges_per_head;
  int work_capacity;
};

}  // namespace msa::cuda::k2q
