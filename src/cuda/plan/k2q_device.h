// Device k2q planner (spec §2): the reverse CSR and work list built on the GPU from device
// cu_seqlens_q / k_len / topk, with no host synchronisation (capturable in a CUDA graph).
// Byte-identical to the host builder (core/k2q_host.cpp) in row_coords, row_ptr, qsplit and
// split_counts; the same work items as a set (given the same tile routing). The host plan's
// q_indices is not built on the device (no kernel reads it): k2q_device_snapshot derives it
// from qsplit.
//
// Every size comes from host-known bounds (batch, total_q, max_k_len); total_rows is data
// dependent, so arrays are laid out with capacities and the meaningful part is described
// field by field in K2qDeviceBuffers. The caller owns the memory: k2q_device_layout() takes the
// buffers from an Arena, once on a sizing arena (the byte count) and once on the workspace.
//
// Files: k2q_device.cu (geometry, layout, launch), k2q_kernels.cuh (the general path's
// kernels), k2q_bitmap_kernels.cuh (the bitmap path's own), k2q_small_kernels.cuh (the small
// path's), k2q_grid_kernels.cuh (the grid path's), k2q_fused_kernels.cuh (the fused path's),
// k2q_params.h (what the kernels read),
// k2q_snapshot.cpp (the host copy).
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/common/workspace.h"
#include "cuda/plan/tile_route.h"
#include "msa/plan.h"

typedef struct CUstream_st* cudaStream_t;

namespace msa::cuda {

// The device planner's five ways to build the same plan (K2qDeviceGeometry::path).
enum class K2qPath { kGeneral, kSmall, kGrid, kFused, kBitmap };

// Host-known geometry of one device plan. All counts are elements.
struct K2qDeviceGeometry {
  std::int64_t batch = 0;      // B
  std::int64_t total_q = 0;    // packed query rows
  std::int64_t max_k_len = 0;  // host bound on every k_len[b]
  int h_kv = 0;
  int topk = 0;                     // K, 1..32 (one warp segment per query)
  int q_per_item = 0;               // work-item chunk (msa::plan_q_per_item)
  std::int64_t max_blocks = 0;      // ceil(max_k_len / kBlockSize): levels, and blocks of a request
  std::int64_t max_rows = 0;        // batch * max_blocks >= total_rows
  std::int64_t edges_per_head = 0;  // total_q * topk
  std::int64_t work_capacity = 0;   // msa::k2q_sizes(..., capacity_q_per_item).work_capacity
  // Histogram units: each warp of the count/scatter kernels owns up to q_per_unit consecutive
  // queries of one request. q_per_unit grows with max_blocks so that the per-unit histograms
  // (max_units x max_blocks) stay about the size of the edge list, and shrinks (to 8) for small
  // batches, whose few warps would otherwise walk their queries in series.
  int q_per_unit = 0;
  std::int64_t max_units = 0;       // ceil(total_q / q_per_unit) + batch
  int unit_warps = 0;               // warps per CTA of the count/scatter kernels
  std::size_t unit_smem_bytes = 0;  // dynamic shared memory of those CTAs
  // Which kernels build the plan (same output byte for byte; tests set any path that fits):
  // - kFused (k2q_fused_kernels.cuh): the general path's passes in one cooperative launch, where
  //   it fits (k2q_fused_fits) and was measured faster;
  // - kGrid (k2q_grid_kernels.cuh): one cooperative launch of h_kv * grid_tasks_per_head CTAs,
  //   where it fits (k2q_grid_fits) and was measured faster;
  // - kSmall (k2q_small_kernels.cuh): two launches of one CTA per KV head (build, finish), where
  //   it fits (k2q_small_fits) and was measured faster than the general path;
  // - kBitmap (k2q_bitmap_kernels.cuh): the general path's stages on 32-query units counted and
  //   placed as bit words, where it fits (k2q_bitmap_fits) and was measured faster;
  // - kGeneral (k2q_kernels.cuh): eight kernels, any size.
  K2qPath path = K2qPath::kGeneral;
  std::size_t small_smem_bytes = 0;  // dynamic shared memory of the small path's head CTA
  int grid_tasks_per_head = 0;       // grid path: level ranges per KV head (0: does not fit)
  int fused_tasks_per_head = 0;      // fused path: row ranges per KV head (0: does not fit)
  int fused_q_per_unit = 0;          // fused path: queries per unit task (max_units covers its units)
  std::int64_t bitmap_units = 0;     // bitmap path: units of 32 queries, ceil(total_q / 32) + batch
                                     // (0: does not fit)
};

// Whether the small path can plan this geometry: 1..64 requests, at most 1024 queries, 16384
// top-k slots per head (queries x next power of two >= topk), 6144 rows, and 65536 (head, row)
// pairs (k2q_params.h, kSmall*).
bool k2q_small_fits(const K2qDeviceGeometry& geo);

// Whether the grid path can plan this geometry: 1..64 requests, at most 4096 queries, topk <= 32,
// h_kv <= 128, and at most 256 rows per task (k2q_params.h, kGrid*). Sets grid_tasks_per_head.
// At launch it also needs its CTAs resident together (two per SM); where the device cannot
// hold them, build_k2q_device takes the small or the general path instead.
bool k2q_grid_fits(K2qDeviceGeometry& geo);

// Whether the fused path can plan this geometry: 1..64 requests, h_kv <= 128, and requests of at
// most 4096 blocks (k2q_params.h, kFused*). Sets fused_tasks_per_head and fused_q_per_unit. It
// runs on as many CTAs as the device holds at once (any number is correct).
bool k2q_fused_fits(K2qDeviceGeometry& geo);

// Whether the bitmap path can plan this geometry: at least one request, each of at most
// k2q::kBitmapMaxBlocks blocks (k2q_params.h). Sets bitmap_units.
bool k2q_bitmap_fits(K2qDeviceGeometry& geo);

// Dynamic shared memory the count/scatter kernels get without an opt-in attribute; plans above
// it raise the attribute (see build_k2q_device).
inline constexpr std::size_t kK2qUnitSmemDefault = 48 * 1024;

// A geometry and the bytes of its workspace (k2q_device_layout on a sizing Arena).
struct K2qDeviceSizes {
  K2qDeviceGeometry geo;
  std::size_t total = 0;  // workspace bytes (256-byte aligned base)
};

// Sizes for a problem. Throws msa::Error for what the device planner does not support
// (topk > 32, int32 overflow of the plan, a request with more blocks than shared memory holds
// counters for). Needs no device: the CUB scan's scratch is cub_temp_bound() (cuda/common/cub_temp.h).
// The work list holds the items of chunks of capacity_q_per_item (1..q_per_item; 0: q_per_item),
// so that a workspace sized with the smallest chunk the automatic choice takes fits every
// smaller problem whatever chunk it is planned with.
K2qDeviceSizes k2q_device_sizes(int h_kv, int topk, int q_per_item, const ProblemSize& problem,
                                int capacity_q_per_item = 0);

// (edges, work items) of one CSR row, edges << 32 | items: one 64-bit sum scans both.
using K2qRowTotal = unsigned long long;

// Device arrays of one plan, views into the workspace. "meaningful" = what equals the host
// builder's array byte for byte; the rest of each capacity is unspecified unless stated.
struct K2qDeviceBuffers {
  std::int32_t* row_coords;    // [max_rows, 2] (b, block); meaningful [total_rows, 2]
  std::int32_t* row_ptr;       // [h_kv, max_rows + 1], row stride max_rows + 1; meaningful
                               // row_ptr[h, 0..total_rows]; entries total_rows..max_rows of a
                               // head all equal its edge count (so row_ptr[h, max_rows] = edges)
  std::int32_t* qsplit;        // [h_kv, edges_per_head] qsplit::encode(q_local, slot),
                               // qsplit::kUnused tail (all meaningful)
  std::int32_t* split_counts;  // [total_q, h_kv] (all meaningful)
  WorkItem* work;              // [work_capacity]; meaningful [work_count], ordered by
                               // (kv_head, row, q_begin)
  std::int32_t* work_count;    // [1]
  std::int32_t* total_rows;    // [1] sum_b ceil(k_len[b] / kBlockSize)
  // scratch
  std::int32_t* row_of;       // [batch, max_blocks] row id of (b, block), block < rows_b
  std::int32_t* unit_start;   // [batch + 1] first unit of request b; [batch] = unit count
  std::int32_t* unit_counts;  // [h_kv, max_units, max_blocks] per-unit edge counts per block,
                              // then their exclusive prefix along the units of the request
                              // (the bitmap path: [h_kv, bitmap_units, max_blocks], each
                              // segment's bits, then their prefix, at its first unit's row)
  std::uint32_t* unit_bits;   // [h_kv, bitmap_units, max_blocks] bitmap path: bit i of a word =
                              // query i of the unit selects the block (bound: bitmap_words)
  std::int32_t* unit_extent;  // [h_kv, bitmap_units] bitmap path: 1 + the unit's last block with a
                              // bit (0: none); the walk reads no word past it
  K2qRowTotal* row_totals;    // [h_kv, max_rows + 1] (edges, work items) per row
  K2qRowTotal* row_scan;      // [h_kv, max_rows + 1] exclusive scan of row_totals (flat)
  K2qRowTotal* task_totals;   // [k2q::kGridMaxTasks] grid path: (edges, work items) per task
  void* cub_temp;             // [cub_temp_bound(h_kv * (max_rows + 1)) bytes]
};

// The planner's workspace layout: takes its buffers from `arena` in the order above (each piece
// 256-byte aligned, docs/layouts.md). On a sizing Arena the pointers are null and
// arena.bytes() grows by K2qDeviceSizes::total.
K2qDeviceBuffers k2q_device_layout(const K2qDeviceGeometry& geo, Arena& arena);

// Device inputs. cu_seqlens_q and k_len contiguous int32; topk int32 with its last dim
// contiguous. Values are not trusted: ranges are clamped so that no input makes the planner
// read or write out of bounds (results for inputs that break the batch contract are
// unspecified; the host builder rejects them).
struct K2qDeviceInputs {
  const std::int32_t* cu_seqlens_q;  // [batch + 1]
  const std::int32_t* k_len;         // [batch], each <= max_k_len
  const std::int32_t* topk;          // [h_kv, total_q, topk]
  std::int64_t stride_topk_head;     // elements
  std::int64_t stride_topk_token;    // elements
  // PrefillPath::kAuto routing (core/tile_route.h), or null: the rows of flagged tiles get no
  // edge and split count 1, as build_k2q_csr_routed leaves them.
  const std::uint8_t* union_tile = nullptr;  // [h_kv, tiles_per_head(total_q, route_q_per_tile)]
  int route_q_per_tile = 0;                  // 1..32 when union_tile is set
  // Or the routing to compute first (union_tile null): build_k2q_device fills route's outputs
  // (in the small path's head CTAs, or in CTAs of the general path's row map launch) and
  // leaves the flagged tiles' rows out. Its inputs must be the ones above.
  const TileRouteParams* route = nullptr;
};

// Enqueues the planner on `stream`: no host synchronisation, no allocation, graph-capturable.
// Plans whose unit_smem_bytes or small_smem_bytes exceed kK2qUnitSmemDefault (max_k_len > 1.5M
// tokens; on the small path, above 48 KB with the head kernel's static shared memory) raise a
// kernel attribute the first time a size is seen (process-wide, current device), and the grid
// and fused paths raise their kernels' to their largest need and ask the device's occupancy the
// first time one is taken on a device; make those first calls outside a capture.
void build_k2q_device(const K2qDeviceGeometry& geo, const K2qDeviceInputs& in, const K2qDeviceBuffers& out,
                      cudaStream_t stream);

// That one-time setup of the grid and fused paths on the current device, ahead of a capture (SparsePrefill's
// CUDA backend calls it when it is constructed). Idempotent; build_k2q_device does it if needed.
void k2q_device_prepare();

// Synchronises `stream` and copies the meaningful part of the plan into a host K2qCsr (the
// host builder's layout). A debugging and testing aid; never on a hot path.
K2qCsr k2q_device_snapshot(const K2qDeviceGeometry& geo, const K2qDeviceBuffers& buffers, cudaStream_t stream);

}  // namespace msa::cuda
