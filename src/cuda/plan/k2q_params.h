// What the device k2q planner's kernels (k2q_kernels.cuh) read and write, and the launch shapes
// they are compiled for. Built by k2q_device.cu from a K2qDeviceGeometry and the caller's buffers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/host_device.h"
#include "cuda/plan/k2q_device.h"
#include "msa/plan.h"

namespace msa::cuda::k2q {

inline constexpr int kMapThreads = 256;       // row map CTA
inline constexpr int kPrefixWarps = 16;       // unit prefix CTA: warps split the units
inline constexpr int kPrefixBatch = 8;        // counts loaded before they are summed
inline constexpr int kPassBatch = 4;          // top-k passes loaded ahead of their analysis
inline constexpr int kFinalizeThreads = 256;  // row_ptr and work items: one thread per entry
inline constexpr int kRouteListItems = 32;    // the finish launch's list CTA: ranks per thread and round
inline constexpr int kTailThreads = 256;      // finish pass
inline constexpr int kTailMaxCtas = 1024;     // finish pass: CTAs sharing all heads' tails
inline constexpr int kMaxUnitWarps = 8;    // count/scatter CTA
inline constexpr int kLevelsPerTile = 32;  // unit prefix: one lane per level
// The small path (k2q_small_kernels.cuh): one CTA per KV head holds every top-k slot of its
// head in shared memory (slot s = q * K' + j, K' = next power of two >= topk) and places a
// round of kSmallRoundQueries queries at a time (a 64-bit mask per row, as two 32-bit words).
inline constexpr int kSmallThreads = 1024;
inline constexpr int kSmallRoundQueries = 64;
inline constexpr int kSmallMaxBatch = 64;
inline constexpr int kSmallMaxQueries = 1024;  // total_q (and so tiles per head)
inline constexpr int kSmallMaxSlots = 16384;   // total_q * K' the head CTA holds
// Where k2q_device_sizes picks the small path: at most this many slots per head and (KV head,
// row) pairs. One SM per head does a head's work, so its time grows with the slots: on the H100
// (docs/performance.md, step 22) it took 12-38 us up to 2736 slots (171 queries) on 16k-128k
// prefixes, batches of 1-16 (the general path 30-60 us), tied at 4096 slots (57 against 59 us)
// and lost at 8192 (65 against 57 us). Rows cost less: 4 requests on 128k prefixes (16400
// pairs) took 38 us against 60.
inline constexpr int kSmallChosenSlots = 3072;
inline constexpr int kSmallChosenPairs = 4 * 6144;
inline constexpr int kSmallMaxRows = 6144;     // max_rows (4 requests of 128k tokens: 4100)
inline constexpr int kSmallItemsPerThread = 4;  // a finish CTA's scans (its s_first: 16 KB)
static_assert(kSmallRoundQueries == 64, "a round's queries are the bits of two 32-bit words per row");
// The head CTA's dynamic shared memory at the limits (small_smem below: 4 slots + 24 rows + 4
// bytes) leaves room for its static arrays within the 227 KB of an sm_90 CTA; a finish CTA's
// row map (4 bytes a row) and s_first stay within the 48 KB default with its static memory.
static_assert(4 * kSmallMaxSlots + 24 * kSmallMaxRows + 4 <= 216 * 1024, "head CTA shared memory");
static_assert(4 * kSmallMaxRows + 4 * kSmallThreads * kSmallItemsPerThread <= 44 * 1024, "finish CTA shared memory");
static_assert(kSmallMaxQueries <= 2048 && kSmallMaxRows <= 32768,
              "the head CTA packs a kept slot as row << 16 | q_local << 5 | rank in an int");

// The head CTA's dynamic shared memory (byte offsets): the slots [slots] int (raw ids, then
// packed kept slots); the row of each (request, block) [max_rows] int; the per-row counts, then
// cursors [max_rows + 1] int; the round masks [2 rounds in turn, max_rows, 2] u32, which routing
// first uses as bitmaps of rows [kSmallRoundQueries tiles at most, ceil(max_rows / 32)] u32.
struct SmallSmem {
  int row_of_off;
  int count_off;
  int mask_off;
  int mask_words;  // u32 words of the mask region
  int bytes;
};
MSA_HOST_DEVICE SmallSmem small_smem(int max_rows, int slots) {
  SmallSmem s;
  s.row_of_off = 4 * slots;
  s.count_off = s.row_of_off + 4 * max_rows;
  s.mask_off = s.count_off + 4 * (max_rows + 1);
  const int bitmap_words = kSmallRoundQueries * ((max_rows + 31) / 32);
  s.mask_words = 4 * max_rows > bitmap_words ? 4 * max_rows : bitmap_words;
  s.bytes = s.mask_off + 4 * s.mask_words;
  return s;
}
static_assert(kLevelsPerTile == 32, "the unit prefix maps the levels of a tile to the lanes of a warp");

// The grid path (k2q_grid_kernels.cuh): one cooperative launch of kGridThreads-thread CTAs, one
// task each: a KV head and a range of levels, so at most kGridTaskRows rows (every request's
// block at those levels), which the task owns. Each task reads every query of its head and keeps
// the edges that fall on its rows; a placement round is kGridThreads queries, one per thread, and
// a row's mask of the round's queries (kGridMaskWords words) gives an edge its rank in the row.
inline constexpr int kGridThreads = 256;
inline constexpr int kGridTaskRows = kGridThreads;  // one row per thread for the row scans
inline constexpr int kGridMaskWords = kGridThreads / 32;
inline constexpr int kGridMaxTasks = 128;  // CTAs: two per SM fit on every Hopper part
inline constexpr int kGridMaxBatch = 64;   // a level's requests are the bits of one 64-bit word
inline constexpr int kGridMaxQueries = 4096;
inline constexpr int kGridMaxTopk = 32;
// Where k2q_device_sizes picks the grid path (H100, docs/performance.md steps 41 and 42): it
// planned 64-512 queries in 27-45 us (graph replays) where the small path took 19-67 and the
// general path 40-46, but a single request of 1-64 queries took 17-27 us against the small
// path's 14-19. The fused path planned 171-256 queries 1-4 us faster in graph replays, but the
// eager calls were 3-8 us slower there (step 42), and after step 43 no faster (within 2 us;
// 1-16 queries of 4 requests on 128k prefixes 4-6 us slower); from 512 queries they were 5-16
// us faster.
inline constexpr int kGridChosenQueries = 256;
inline constexpr int kGridSmallSlots = 1024;   // small path chosen and at most this many slots ...
inline constexpr int kGridSmallPairs = 12288;  // ... and (head, row) pairs: the small path stays

// The fused path (k2q_fused_kernels.cuh): the general path's passes in one cooperative launch of
// kFusedThreads-thread CTAs, separated by grid barriers. A unit task's warps each keep a counter
// per block of the request in shared memory (kFusedWarps x max_blocks ints, so max_blocks is
// bounded), and its row tasks' totals go to task_totals (at most kGridMaxTasks of them).
inline constexpr int kFusedThreads = 256;
inline constexpr int kFusedWarps = kFusedThreads / 32;
inline constexpr int kFusedMaxBatch = 64;     // requests: two per lane of one warp's scans
inline constexpr int kFusedMaxBlocks = 4096;  // 512k tokens: 128 KB of counters
inline constexpr int kFusedPrefixBatch = 32;  // a row's unit counts loaded together (phase 2)
inline constexpr int kFusedCursorBatch = 4;   // blocks' first places loaded together (scatter)
// Where k2q_device_sizes picks the fused path (steps 42, 43 and 61): where the grid path is not
// chosen and the small path's problem is not light, up to this many queries. It planned
// 171-4096 queries on 16k-128k prefixes in 24-43 us where the general path took 39-53. At 8192
// queries (its 8 warps per SM walking 32 queries each) it was within 2.5 us of the general path
// on the H100 and 1-9 us faster on the H200, in one launch instead of eight; from 12288 queries
// it is slower on both.
inline constexpr int kFusedChosenQueries = 8192;
static_assert(kFusedMaxBatch <= 64, "the unit scan holds two requests per lane");
static_assert(kFusedMaxBlocks < (1 << 20), "a row's block fits 20 bits of its coordinate word");

// The bitmap path (k2q_bitmap_kernels.cuh): the general path's stages on units of 32 queries,
// one bit each, so that a unit's edges on a block are one word. Its unit_bits hold a word per
// (KV head, unit, block), up to the unit's last non-empty one (unit_extent), for requests of up
// to kBitmapMaxBlocks blocks (256k tokens), where it fits: a bits CTA holds 32 KB of words. At
// 1024 blocks it planned S = 128k in 329 us where the general path took 597 (h_kv 4), 1.92 ms
// against 3.58 at h_kv 32 (H200, docs/performance.md steps 65, 66); at 2048 blocks (S = 256k)
// 690 us against 1269 (h_kv 4), 4.45 ms against 7.74 (h_kv 32; step 67).
inline constexpr int kBitmapQPerUnit = 32;
inline constexpr int kBitmapWarps = 8;  // walk CTA: one unit per warp
// Bits CTA: one unit per warp; a segment (the unit prefix's row) is a request's units in one.
// Its words take kBitsWarps * kBitmapMaxBlocks * 4 bytes of shared memory (32 KB).
inline constexpr int kBitsWarps = 4;
inline constexpr int kBitmapMaxBlocks = 2048;
static_assert(kBitmapWarps % kBitsWarps == 0, "a walk CTA holds whole segments");
// Where k2q_device_sizes picks it over the fused path (H200, docs/performance.md step 65): from
// 4097 queries where there are at least 32 queries per block of the longest request (5k-8k
// queries on prefixes up to as long: 36-58 us fused, 36-46 bitmap). With fewer queries per
// block the walk's words outnumber the edges it places (6144 queries on a 32k prefix: fused 49
// us, bitmap 57); at 4096 queries without prefix the fused path was 3 us faster.
inline constexpr int kBitmapOverFusedQueries = 4096;
inline constexpr int kBitmapOverFusedQueriesPerBlock = 32;

// A grid task's dynamic shared memory (it shares the bytes with the routing warps' tables).
struct GridTaskSmem {
  unsigned long long level_requests[kGridTaskRows];  // level l0 + i: bit b = request b has a block there
  int level_row[kGridTaskRows + 1];                  // first row of level l0 + i; [levels] = the task's end
  int coord[kGridTaskRows];                          // task row i: b << 20 | block
  int edges[kGridTaskRows];                          // edges of task row i
  int cursor[kGridTaskRows];                         // its next edge's place (placement)
  int first_item[kGridTaskRows];                     // exclusive scan of the rows' items
  unsigned mask[kGridTaskRows * kGridMaskWords];     // placement round: bit (warp, lane) per row
};

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
  int route_group;  // h_q / h_kv, for the small path's own routing (union_path_wins)
  // Routing computed by the small path itself (k2q_small_kernels.cuh; null union_tile: not
  // asked). Then union_tile above is null and route_tile_out gets the flags.
  std::uint8_t* route_tile_out;  // [h_kv, route_per_head]
  // The bitmap path routing the tiles that lie inside one of its units itself (in its bits
  // kernel, from the unit's words), where the planner routes and route_q_per_tile divides 32;
  // the row map launch then routes only the tiles that span requests (null: not asked).
  std::uint8_t* fold_tile_out;  // [h_kv, route_per_head], the array union_tile reads
  // When the planner routed (either path; null otherwise): the flagged tiles in rank order
  // (tile_of_rank; compact_route_list, tile_route.cuh). The general path compacts union_tile
  // (which its route/map launch wrote) in its finish launch.
  std::int32_t* union_list;   // [h_kv * route_per_head]
  std::int32_t* union_count;  // [1]
  // and, when combine_list is set, the other tiles in rank order (the rows the combine merges)
  std::int32_t* combine_list;   // [h_kv * route_per_head] or null
  std::int32_t* combine_count;  // [1]
  // outputs
  std::int32_t* row_coords;    // [max_rows, 2] (b, block)
  std::int32_t* row_ptr;       // [h_kv, max_rows + 1]
  std::int32_t* qsplit;        // [h_kv, edges_per_head] qsplit words (core/plan_encoding.h)
  std::int32_t* split_counts;  // [total_q, h_kv]
  WorkItem* work;              // [work_capacity]
  std::int32_t* work_count;    // [1]
  std::int32_t* total_rows;    // [1]
  // scratch
  std::int32_t* row_of;       // [batch, max_blocks]
  std::int32_t* unit_start;   // [batch + 1]
  std::int32_t* unit_counts;  // [h_kv, max_units, max_blocks]
  std::uint32_t* unit_bits;   // [h_kv, max_units, max_blocks] bitmap path: bit i = query i of the unit
  std::int32_t* unit_extent;  // [h_kv, max_units] bitmap path: 1 + the unit's last block with a bit
  K2qRowTotal* row_totals;    // [h_kv, max_rows + 1] edges << 32 | items per row
  K2qRowTotal* row_scan;      // [h_kv, max_rows + 1] flat exclusive scan of row_totals
  K2qRowTotal* task_totals;   // [kGridMaxTasks] grid path: (edges, work items) of each task
  // geometry
  int batch;
  int total_q;
  int h_kv;
  int topk;
  int topk_pow2;  // K' = next power of two >= topk (lanes per query)
  int log_topk_pow2;
  int q_per_item;
  int q_per_unit;
  bool unit_aligned;  // bitmap path: a unit is the queries of a request in one 32-aligned window
  int max_blocks;
  int max_rows;
  int max_units;
  int level_tiles;  // ceil(max_blocks / kLevelsPerTile), at least 1
  int unit_warps;
  int edges_per_head;
  int work_capacity;
  int tasks_per_head;  // grid path: level ranges per KV head (h_kv * tasks_per_head CTAs);
                       // fused path: row ranges per KV head (h_kv * tasks_per_head row tasks)
};

}  // namespace msa::cuda::k2q
