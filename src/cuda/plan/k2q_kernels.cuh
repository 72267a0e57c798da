// The device k2q planner's general path, whose row map, unit prefix, finalize and finish the
// bitmap path (k2q_bitmap_kernels.cuh, which includes this) shares. Its kernels, in launch order
// (build_k2q_device, k2q_device.cu):
//
//   1. row map     one CTA per level l: rows of level l start at sum_b min(rows_b, l) and are
//                  numbered request-minor by a block scan of (rows_b > l); one extra CTA scans
//                  the per-request unit counts (unit_start) and sums total_rows. Under
//                  PrefillPath::kAuto the same launch routes the tiles in CTAs of its own.
//   2. count       one warp per (unit, kv head): a unit is <= q_per_unit consecutive queries of
//                  one request; it counts its edges per block in a shared-memory histogram and
//                  writes split_counts.
//   3. unit prefix one CTA per (kv head, request, 32 levels): exclusive prefix of the
//                  per-unit counts along the request's units (in place; each warp a chunk of
//                  units, lanes = levels, so every access is a coalesced row of counts), and
//                  the row's (edges, work items).
//      flat scan   cub::DeviceScan over [h_kv, max_rows + 1] (edges, items) pairs (launched by
//                  build_k2q_device), rows past total_rows read as zeros.
//      finalize    one launch, two kinds of CTA: row_ptr (the flat scan minus the head's base)
//                  and work_count; one thread per work slot writing its WorkItem (binary
//                  search over the scan).
//   4. scatter     the count warps again: per-block cursors = row_ptr + unit prefix, qsplit
//                  placed in query order (lane order within a pass) with no global atomics, so
//                  every row is q-ascending exactly as the host's sequential writer leaves it.
//   5. finish      qsplit::kUnused after each head's last edge; and, when the planner routed,
//                  one CTA compacting the routed tiles' list (tile_route.cuh).
//
// Per query the selection is the set of ids in [0, rows_b) and a kept id's slot is the number
// of kept ids below it: a warp holds 32 / K' queries (K' = next power of two >= topk), one id
// per lane; one warp match says which ids are kept (first in their row), and K' segment
// shuffles give the slots, which only the scatter needs.
#pragma once

#include <climits>
#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "core/plan_encoding.h"
#include "cuda/plan/k2q_params.h"
#include "cuda/plan/tile_keys.cuh"
#include "cuda/plan/tile_route.cuh"

namespace msa::cuda::k2q {

inline constexpr unsigned kFullMask = 0xffffffffu;

// Row totals (K2qRowTotal): items never carry, their total is <= work_capacity < 2^31. The
// edges half may wrap mod 2^32 across heads, which is harmless: a head's row_ptr is the
// difference from the head's base mod 2^32, exact because a head has < 2^31 edges.
__device__ __forceinline__ K2qRowTotal row_total(unsigned edges, unsigned items) {
  return (static_cast<K2qRowTotal>(edges) << 32) | items;
}
__device__ __forceinline__ unsigned total_edges(K2qRowTotal t) { return static_cast<unsigned>(t >> 32); }
__device__ __forceinline__ unsigned total_items(K2qRowTotal t) { return static_cast<unsigned>(t); }

// ---- per-request geometry (inputs clamped so that nothing reads or writes out of bounds) ----

// A work item's edges [q_begin, q_begin + q_count) of its head, kept inside the head's
// edges_per_head: with a valid batch they always are; requests overlapping on the device
// (cu_seqlens_q out of order) count queries twice, and an item past the head's edges would have
// the block-major kernel read another head's (or another array's) words.
struct ItemSpan {
  int q_begin;
  int q_count;
};
__device__ __forceinline__ ItemSpan item_span(const BuildParams& p, int q_begin, int q_count) {
  const auto edges = static_cast<int>(p.edges_per_head);
  const int begin = min(max(q_begin, 0), edges);
  return ItemSpan{begin, max(0, min(q_count, edges - begin))};
}

__device__ __forceinline__ int request_blocks(const BuildParams& p, int b) {
  const int kl = max(p.k_len[b], 0);
  return min(kl / kBlockSize + (kl % kBlockSize != 0 ? 1 : 0), p.max_blocks);
}

struct QueryRange {
  int begin;
  int end;
};

__device__ __forceinline__ QueryRange request_queries(const BuildParams& p, int b) {
  const int begin = min(max(p.cu_seqlens_q[b], 0), p.total_q);
  const int end = min(max(p.cu_seqlens_q[b + 1], begin), p.total_q);
  return QueryRange{begin, end};
}

// ---- stage 1: routing (PrefillPath::kAuto), row map and units -------------------------------

// The row map's CTA scratch, at the start of the launch's dynamic shared memory (where the
// routing CTAs keep their tables).
struct MapTemp {
  using Scan = cub::BlockScan<int, kMapThreads>;
  using Reduce = cub::BlockReduce<int, kMapThreads>;
  union {
    Scan::TempStorage scan;
    Reduce::TempStorage reduce;
  };
  int level_start;
};

// Units of a request's queries: chunks of q_per_unit from its first query, or (unit_aligned) its
// parts in q_per_unit-aligned windows of the packed queries, of which it adds at most one more.
__device__ __forceinline__ int unit_count(const BuildParams& p, QueryRange r) {
  if (r.end <= r.begin) return 0;
  if (p.unit_aligned) return (r.end - 1) / p.q_per_unit - r.begin / p.q_per_unit + 1;
  return (r.end - r.begin + p.q_per_unit - 1) / p.q_per_unit;
}

// One CTA of the row map: level < max_blocks numbers its rows, level == max_blocks writes
// unit_start and total_rows.
__device__ __forceinline__ void row_map_cta(const BuildParams& p, int level, MapTemp& tmp) {
  using Scan = MapTemp::Scan;
  using Reduce = MapTemp::Reduce;
  const int tid = threadIdx.x;
  if (level == p.max_blocks) {
    // unit_start = exclusive scan of ceil(q_len / q_per_unit); total_rows.
    int carry = 0;
    int rows_part = 0;
    for (int base = 0; base < p.batch; base += kMapThreads) {
      const int b = base + tid;
      int units = 0;
      if (b < p.batch) {
        const QueryRange r = request_queries(p, b);
        units = unit_count(p, r);
        rows_part += request_blocks(p, b);
      }
      int ex = 0, agg = 0;
      Scan(tmp.scan).ExclusiveSum(units, ex, agg);
      if (b < p.batch) p.unit_start[b] = min(carry + ex, p.max_units);
      carry += agg;
      __syncthreads();  // tmp is reused by the next iteration
    }
    const int rows = Reduce(tmp.reduce).Sum(rows_part);
    if (tid == 0) {
      p.unit_start[p.batch] = min(carry, p.max_units);
      *p.total_rows = rows;
    }
    return;
  }

  // Rows of the levels below this one: sum_b min(rows_b, level).
  int part = 0;
  for (int b = tid; b < p.batch; b += kMapThreads) part += min(request_blocks(p, b), level);
  const int start = Reduce(tmp.reduce).Sum(part);
  if (tid == 0) tmp.level_start = start;
  __syncthreads();
  int carry = tmp.level_start;
  for (int base = 0; base < p.batch; base += kMapThreads) {
    const int b = base + tid;
    const int has = (b < p.batch && request_blocks(p, b) > level) ? 1 : 0;
    int ex = 0, agg = 0;
    Scan(tmp.scan).ExclusiveSum(has, ex, agg);
    if (has) {
      const int row = carry + ex;
      p.row_coords[2 * static_cast<std::int64_t>(row)] = b;
      p.row_coords[2 * static_cast<std::int64_t>(row) + 1] = level;
      p.row_of[static_cast<std::int64_t>(b) * p.max_blocks + level] = row;
    }
    carry += agg;
    __syncthreads();
  }
}

// One launch, two kinds of CTA, both reading only the inputs: the first route_ctas route the
// tiles of `route` (one warp per tile at a time, tile_route.cuh), the others map rows (level =
// blockIdx.x - route_ctas), so that the row map runs beside the routing instead of after it
// (docs/performance.md, step 36). route_ctas is 0 when the plan does not route. Dynamic shared
// memory: the larger of MapTemp and tile_route_smem_bytes(route). One instance per lane share
// of a tile's ids (route_lane_entries: 4, 8 or 16), which registers hold: the smaller two fit 4
// CTAs per SM (64 registers); the largest takes 80 (ptxas, with the spanning-only loop) and keeps
// 3 rather than spill.
static_assert(kMapThreads == kRouteWarps * 32, "routing and row map CTAs share the launch's block size");
// spanning_only (the bitmap path routing the other tiles itself): only tiles that span requests.
template <int kLaneEntries>
__global__ void __launch_bounds__(kMapThreads, kLaneEntries <= 8 ? 4 : 3)
    k2q_route_map_kernel(const BuildParams p, const TileRouteParams route, int route_ctas, int spanning_only) {
  extern __shared__ __align__(16) unsigned char s_dyn[];
  if (static_cast<int>(blockIdx.x) >= route_ctas) {  // CTA-uniform
    row_map_cta(p, static_cast<int>(blockIdx.x) - route_ctas, *reinterpret_cast<MapTemp*>(s_dyn));
    return;
  }
  route_cta<kLaneEntries>(route, static_cast<int>(blockIdx.x), route_ctas, reinterpret_cast<std::int32_t*>(s_dyn),
                          spanning_only != 0);
}

// ---- shared by the count and scatter warps --------------------------------------------------

struct Unit {
  int b;
  int q_request;  // the request's first packed query (q_local = q - q_request)
  int q_begin;    // this unit's packed queries [q_begin, q_end)
  int q_end;
  int blocks;  // rows_b
};

// The request owning unit u (< unit_start[batch]): the last b with unit_start[b] <= u.
__device__ __forceinline__ Unit locate_unit(const BuildParams& p, int u) {
  const int lo = last_at_most(p.unit_start, p.batch, u);
  const QueryRange r = request_queries(p, lo);
  Unit unit;
  unit.b = lo;
  unit.q_request = r.begin;
  if (p.unit_aligned) {
    const int window = (r.begin / p.q_per_unit + (u - p.unit_start[lo])) * p.q_per_unit;
    unit.q_begin = max(window, r.begin);
    unit.q_end = min(window + p.q_per_unit, r.end);
  } else {
    unit.q_begin = r.begin + (u - p.unit_start[lo]) * p.q_per_unit;
    unit.q_end = min(unit.q_begin + p.q_per_unit, r.end);
  }
  unit.blocks = request_blocks(p, lo);
  return unit;
}

// One lane's view of a pass: lane = (query segment, slot).
struct PassLane {
  int q;          // packed query of this lane's segment
  int id;         // the raw id (meaningful when keep)
  int slot;       // rank of id among the query's kept ids (meaningful when keep; scatter only)
  int count;      // kept ids of the query (same in every lane of the segment)
  bool keep;      // in-range id, first occurrence in its row
  bool seg_head;  // slot lane 0 of a real query: writes split_counts
};

// Whether (query q, KV head h) is routed to the tile-union kernel (PrefillPath::kAuto).
__device__ __forceinline__ bool routed_row(const BuildParams& p, int h, int q) {
  // A plain load (L1 serves a tile's lanes; reading at L2 made the general path's plan 5-10%
  // slower, docs/performance.md step 42). The grid path reads flags that other CTAs of its
  // launch wrote, but only after the grid barrier that follows the routing, before which no CTA
  // loads a flag, so no L1 holds an older line; a fused unit task reads only the flags of tiles
  // its own CTA routed (another CTA may write the same value there).
  return p.union_tile != nullptr &&
         p.union_tile[static_cast<std::int64_t>(h) * p.route_per_head + q / p.route_q_per_tile] != 0;
}

// This lane's raw id of the pass starting at query q0 (-1 outside the unit or the row, and
// for a routed row, which has no edge here).
__device__ __forceinline__ int load_pass_id(const BuildParams& p, const std::int32_t* g_topk_head, int h, int q0,
                                            int q_end, int lane) {
  const int q = q0 + (lane >> p.log_topk_pow2);
  const int s = lane & (p.topk_pow2 - 1);
  return q < q_end && s < p.topk && !routed_row(p, h, q)
             ? __ldg(g_topk_head + static_cast<std::int64_t>(q) * p.stride_topk_token + s)
             : -1;
}

// One query's row of top-k ids spread over a segment of kp lanes (kp a power of two, lane s of
// the segment holding slot s): whether this lane's id is kept (valid, and no lower slot of the
// segment holds it), how many the query keeps, and (kSlot) its rank among the kept ids of the
// query. Warp-collective: every lane of the warp calls it with the same kp.
struct SegmentRank {
  int slot;  // kSlot only, else 0
  int count;
  bool keep;
};

template <bool kSlot = true>
__device__ __forceinline__ SegmentRank rank_in_segment(bool valid, int id, int kp, int log_kp, int lane) {
  const int seg = lane >> log_kp;
  // One match finds the lanes of this segment holding the same id: valid ids (< 2^24, as
  // blocks of an int32 k_len) carry their segment (< 32) above them; an invalid lane's value
  // is negative and its own.
  const unsigned peers = __match_any_sync(kFullMask, valid ? (seg << 24) | id : -1 - lane);
  SegmentRank r;
  r.keep = valid && (peers & ((1u << lane) - 1u)) == 0u;
  int slot = 0;
  if constexpr (kSlot) {  // kept ids of the segment below this one (kept ids are distinct)
    const int kept_key = r.keep ? id : INT_MAX;
    for (int j = 0; j < kp; ++j) slot += __shfl_sync(kFullMask, kept_key, j, kp) < kept_key ? 1 : 0;
  }
  r.slot = slot;
  const unsigned seg_mask = kp == 32 ? kFullMask : ((1u << kp) - 1u) << (seg << log_kp);
  r.count = __popc(__ballot_sync(kFullMask, r.keep) & seg_mask);
  return r;
}

template <bool kSlot>
__device__ __forceinline__ PassLane analyse_pass(const BuildParams& p, int id, int q0, int q_end, int blocks,
                                                 int lane) {
  const int seg = lane >> p.log_topk_pow2;
  const int s = lane & (p.topk_pow2 - 1);
  PassLane e;
  e.q = q0 + seg;
  e.id = id;
  const bool valid = e.q < q_end && s < p.topk && id >= 0 && id < blocks;
  const SegmentRank r = rank_in_segment<kSlot>(valid, id, p.topk_pow2, p.log_topk_pow2, lane);
  e.keep = r.keep;
  e.slot = r.slot;
  e.count = r.count;
  e.seg_head = s == 0 && e.q < q_end;
  return e;
}

// One warp's counts per block of the queries [u.q_begin, u.q_end) into s_hist (which the caller
// zeroed, [u.blocks]; it syncs the warp before reading them); kSplit: also their split counts.
// kPassBatch passes' loads go out together, and a pass without an id (its rows routed: no id is
// loaded for them) only writes its split counts (step 44). Warp-collective; the general path's
// count warps and the fused path's warps.
template <bool kSplit>
__device__ __forceinline__ void count_passes(const BuildParams& p, int h, Unit u, int* s_hist, int lane) {
  const std::int32_t* g_topk_head = p.topk_ids + h * p.stride_topk_head;
  const int q_per_pass = 32 >> p.log_topk_pow2;
  for (int q_batch = u.q_begin; q_batch < u.q_end; q_batch += kPassBatch * q_per_pass) {
    int ids[kPassBatch];  // loads of kPassBatch passes in flight together
#pragma unroll
    for (int k = 0; k < kPassBatch; ++k)
      ids[k] = load_pass_id(p, g_topk_head, h, q_batch + k * q_per_pass, u.q_end, lane);
#pragma unroll
    for (int k = 0; k < kPassBatch; ++k) {
      const int q0 = q_batch + k * q_per_pass;
      if (q0 >= u.q_end) break;                   // warp-uniform
      if (!__any_sync(kFullMask, ids[k] >= 0)) {  // no id in the pass (routed rows): no edge, no analysis
        const int q = q0 + (lane >> p.log_topk_pow2);
        if (kSplit && (lane & (p.topk_pow2 - 1)) == 0 && q < u.q_end)
          p.split_counts[static_cast<std::int64_t>(q) * p.h_kv + h] = routed_row(p, h, q) ? 1 : 0;
        continue;
      }
      const PassLane e = analyse_pass<false>(p, ids[k], q0, u.q_end, u.blocks, lane);  // no slot needed
      if (e.keep) atomicAdd(&s_hist[e.id], 1);
      if (kSplit && e.seg_head)
        p.split_counts[static_cast<std::int64_t>(e.q) * p.h_kv + h] = routed_row(p, h, e.q) ? 1 : e.count;
    }
  }
}

// One warp places the edges of the queries [u.q_begin, u.q_end) at s_cursor [u.blocks] (each
// block's next place, advanced here), in query order: lanes of a pass on the same block take
// consecutive places in lane order, which is query order, with no global atomics. Writes qsplit.
// A pass without an id (its rows routed) places nothing and is skipped. Warp-collective.
__device__ __forceinline__ void scatter_passes(const BuildParams& p, int h, Unit u, int* s_cursor, int lane) {
  const std::int32_t* g_topk_head = p.topk_ids + h * p.stride_topk_head;
  std::int32_t* g_qsplit = p.qsplit + static_cast<std::int64_t>(h) * p.edges_per_head;
  const unsigned lanes_below = (1u << lane) - 1u;
  const int q_per_pass = 32 >> p.log_topk_pow2;
  for (int q_batch = u.q_begin; q_batch < u.q_end; q_batch += kPassBatch * q_per_pass) {
    int ids[kPassBatch];
#pragma unroll
    for (int k = 0; k < kPassBatch; ++k)
      ids[k] = load_pass_id(p, g_topk_head, h, q_batch + k * q_per_pass, u.q_end, lane);
#pragma unroll
    for (int k = 0; k < kPassBatch; ++k) {
      const int q0 = q_batch + k * q_per_pass;
      if (q0 >= u.q_end) break;                           // warp-uniform
      if (!__any_sync(kFullMask, ids[k] >= 0)) continue;  // no id in the pass (routed rows): nothing to place
      const PassLane e = analyse_pass<true>(p, ids[k], q0, u.q_end, u.blocks, lane);
      // A lane that keeps nothing matches only itself.
      const unsigned peers = __match_any_sync(kFullMask, e.keep ? e.id : -1 - lane);
      const int rank = __popc(peers & lanes_below);
      const int base = e.keep ? s_cursor[e.id] : 0;
      __syncwarp();  // every peer has read the cursor before the leader moves it
      if (e.keep && rank == 0) s_cursor[e.id] = base + __popc(peers);
      __syncwarp();
      const int pos = base + rank;
      if (e.keep && pos >= 0 && pos < p.edges_per_head) {
        const int q_local = e.q - u.q_request;
        g_qsplit[pos] = qsplit::encode(q_local, e.slot);
      }
    }
  }
}

// ---- shared by the cooperative paths (k2q_grid_kernels.cuh, k2q_fused_kernels.cuh) -----------

// A task's place among all tasks' (edges, items) totals (tasks numbered head-major, per_head per
// KV head; rows in flat (head, row) order).
struct TaskBase {
  unsigned long long edge_base;   // edges of this head's tasks before it
  unsigned long long head_edges;  // edges of this head
  unsigned long long item_base;   // items of every task before it
  unsigned long long items;       // items of all tasks
};

// Warp-collective: `task`'s TaskBase from totals [n_tasks], which other CTAs wrote before a grid
// barrier (read at L2); every lane gets it.
__device__ __forceinline__ TaskBase task_base(const K2qRowTotal* totals, int n_tasks, int task, int per_head,
                                              int lane) {
  unsigned long long sums[4] = {0, 0, 0, 0};
  const int head0 = task / per_head * per_head;
  for (int t = lane; t < n_tasks; t += 32) {
    const K2qRowTotal v = __ldcg(totals + t);
    const bool same = t >= head0 && t < head0 + per_head;
    sums[0] += same && t < task ? total_edges(v) : 0u;
    sums[1] += same ? total_edges(v) : 0u;
    sums[2] += t < task ? total_items(v) : 0u;
    sums[3] += total_items(v);
  }
#pragma unroll
  for (int k = 0; k < 4; ++k)
    for (int off = 16; off > 0; off >>= 1) sums[k] += __shfl_xor_sync(kFullMask, sums[k], off);
  return TaskBase{sums[0], sums[1], sums[2], sums[3]};
}

// ---- stage 2: per-unit histograms -----------------------------------------------------------

__global__ void __launch_bounds__(kMaxUnitWarps * 32, 4) k2q_count_kernel(const BuildParams p) {
  extern __shared__ int s_unit[];  // [unit_warps, max_blocks]
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int h = blockIdx.y;
  const int u = blockIdx.x * p.unit_warps + warp;
  if (u >= p.unit_start[p.batch]) return;  // warp-uniform; no CTA barrier below
  const Unit unit = locate_unit(p, u);
  int* s_hist = s_unit + static_cast<std::int64_t>(warp) * p.max_blocks;
  for (int l = lane; l < unit.blocks; l += 32) s_hist[l] = 0;
  __syncwarp();
  count_passes<true>(p, h, unit, s_hist, lane);
  __syncwarp();  // shared-memory atomics visible to every lane

  std::int32_t* g_counts = p.unit_counts + (static_cast<std::int64_t>(h) * p.max_units + u) * p.max_blocks;
  for (int l = lane; l < unit.blocks; l += 32) g_counts[l] = s_hist[l];
}

// ---- stage 3: per-row unit prefix and totals --------------------------------------------------

// kSegments (the bitmap path, k2q_bitmap_kernels.cuh): the counts are per segment, a request's
// units inside one CTA of kBitsWarps units (bits kernel), each at its first unit's row of
// unit_counts; the prefix goes to those rows. Otherwise the counts are per unit.
__device__ __forceinline__ int segment_count(int u_begin, int u_end) {
  return u_end > u_begin ? (u_end + kBitsWarps - 1) / kBitsWarps - u_begin / kBitsWarps : 0;
}
// Segment i's row: the request's first unit, then every CTA boundary inside the request.
__device__ __forceinline__ int segment_row(int u_begin, int i) {
  return i == 0 ? u_begin : (u_begin / kBitsWarps + i) * kBitsWarps;
}
template <bool kSegments>
__global__ void __launch_bounds__(kPrefixWarps * 32) k2q_unit_prefix_kernel(const BuildParams p) {
  __shared__ int s_chunk_sum[kPrefixWarps][32];
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int b = blockIdx.x / p.level_tiles;
  const int tile = blockIdx.x - b * p.level_tiles;
  const int h = blockIdx.y;
  if (b >= p.batch) return;  // the one CTA of a launch for an empty batch (B = 0)
  const int blocks = request_blocks(p, b);
  if (tile * kLevelsPerTile >= blocks) return;  // CTA-uniform
  const int level = tile * kLevelsPerTile + lane;
  const bool live = level < blocks;
  // Warp w owns a contiguous chunk of the request's rows (units, or segments).
  const int u_begin = p.unit_start[b];
  const int u_end = p.unit_start[b + 1];
  const int rows = kSegments ? segment_count(u_begin, u_end) : u_end - u_begin;
  const int chunk = (rows + kPrefixWarps - 1) / kPrefixWarps;
  const int my_begin = min(warp * chunk, rows);
  const int my_end = min((warp + 1) * chunk, rows);
  const std::int64_t col = static_cast<std::int64_t>(h) * p.max_units * p.max_blocks + level;
  std::int32_t* g_col = p.unit_counts + col;
  const std::int64_t stride = p.max_blocks;
  const auto at = [&](int i) -> std::int64_t {
    return static_cast<std::int64_t>(kSegments ? segment_row(u_begin, i) : u_begin + i) * stride;
  };
  const auto count = [&](int i) { return g_col[at(i)]; };

  // Pass 1: the chunk's sum per level.
  int sum = 0;
  if (live) {
    for (int u0 = my_begin; u0 < my_end; u0 += kPrefixBatch) {
      int v[kPrefixBatch];
#pragma unroll
      for (int k = 0; k < kPrefixBatch; ++k) v[k] = u0 + k < my_end ? count(u0 + k) : 0;
#pragma unroll
      for (int k = 0; k < kPrefixBatch; ++k) sum += v[k];
    }
  }
  s_chunk_sum[warp][lane] = sum;
  __syncthreads();
  int run = 0, total = 0;
  for (int w = 0; w < kPrefixWarps; ++w) {
    const int c = s_chunk_sum[w][lane];
    run += w < warp ? c : 0;
    total += c;
  }
  // Pass 2: exclusive prefix in place, ascending units.
  if (live) {
    for (int u0 = my_begin; u0 < my_end; u0 += kPrefixBatch) {
      int v[kPrefixBatch];
#pragma unroll
      for (int k = 0; k < kPrefixBatch; ++k) v[k] = u0 + k < my_end ? count(u0 + k) : 0;
#pragma unroll
      for (int k = 0; k < kPrefixBatch; ++k) {
        if (u0 + k < my_end) g_col[at(u0 + k)] = run;
        run += v[k];
      }
    }
  }
  if (warp == 0 && live) {
    const int row = p.row_of[static_cast<std::int64_t>(b) * p.max_blocks + level];
    const unsigned edges = static_cast<unsigned>(total);
    const unsigned items = (edges + static_cast<unsigned>(p.q_per_item) - 1u) / static_cast<unsigned>(p.q_per_item);
    p.row_totals[static_cast<std::int64_t>(h) * (p.max_rows + 1) + row] = row_total(edges, items);
  }
}

// ---- stage 3b: row_ptr, work_count; work items ------------------------------------------------

// CTAs of the finalize launch: [row_ptr, items].
__host__ __device__ inline int finalize_row_ctas(const BuildParams& p) {
  const std::int64_t n = (static_cast<std::int64_t>(p.max_rows) + 1) * p.h_kv;
  return static_cast<int>((n + kFinalizeThreads - 1) / kFinalizeThreads);
}
__host__ __device__ inline int finalize_item_ctas(const BuildParams& p) {
  const int ctas = (p.work_capacity + kFinalizeThreads - 1) / kFinalizeThreads;
  return ctas > 0 ? ctas : 1;
}

// row_ptr[idx] (the flat scan minus the head's base); the last entry, a zero padding row whose
// exclusive value is the total, gives work_count.
__device__ __forceinline__ void finalize_row_ptr(const BuildParams& p, std::int64_t idx) {
  const std::int64_t stride = static_cast<std::int64_t>(p.max_rows) + 1;
  const std::int64_t n = stride * p.h_kv;
  if (idx >= n) return;
  const int h = static_cast<int>(idx / stride);
  p.row_ptr[idx] = static_cast<int>(total_edges(p.row_scan[idx]) - total_edges(p.row_scan[h * stride]));
  if (idx == n - 1)
    *p.work_count = static_cast<int>(min(total_items(p.row_scan[idx]), static_cast<unsigned>(p.work_capacity)));
}

// Work slot w: the row whose items cover it is the last entry whose exclusive item count is
// <= w (rows without items share the next row's value); that row has items, so it is not the
// last entry (the padding row, no items) and the next entry's scan gives its edges.
__device__ __forceinline__ void finalize_item(const BuildParams& p, unsigned w) {
  const std::int64_t stride = static_cast<std::int64_t>(p.max_rows) + 1;
  const std::int64_t n = stride * p.h_kv;
  const unsigned count = min(total_items(p.row_scan[n - 1]), static_cast<unsigned>(p.work_capacity));
  if (w >= count) return;
  std::int64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    const std::int64_t mid = (lo + hi + 1) >> 1;
    if (total_items(p.row_scan[mid]) <= w)
      lo = mid;
    else
      hi = mid - 1;
  }
  const int h = static_cast<int>(lo / stride);
  const int row = static_cast<int>(lo - h * stride);
  const K2qRowTotal ex = p.row_scan[lo];
  const int row_begin = static_cast<int>(total_edges(ex) - total_edges(p.row_scan[h * stride]));
  const int edges = static_cast<int>(total_edges(p.row_scan[lo + 1]) - total_edges(ex));
  const int first = static_cast<int>(w - total_items(ex)) * p.q_per_item;
  const std::int32_t* coords = p.row_coords + 2 * static_cast<std::int64_t>(row);  // (b, block)
  const ItemSpan span = item_span(p, row_begin + first, min(p.q_per_item, edges - first));
  p.work[w] = WorkItem{h, row, span.q_begin, span.q_count, coords[0], coords[1]};
}

__global__ void __launch_bounds__(kFinalizeThreads) k2q_finalize_kernel(const BuildParams p) {
  int cta = blockIdx.x;
  if (cta < finalize_row_ctas(p)) {
    finalize_row_ptr(p, static_cast<std::int64_t>(cta) * kFinalizeThreads + threadIdx.x);
    return;
  }
  cta -= finalize_row_ctas(p);
  finalize_item(p, static_cast<unsigned>(cta) * kFinalizeThreads + threadIdx.x);
}

// ---- stage 4: scatter -----------------------------------------------------------------------

__global__ void __launch_bounds__(kMaxUnitWarps * 32) k2q_scatter_kernel(const BuildParams p) {
  extern __shared__ int s_unit[];  // [unit_warps, max_blocks] write cursors
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int h = blockIdx.y;
  const int u = blockIdx.x * p.unit_warps + warp;
  if (u >= p.unit_start[p.batch]) return;
  const Unit unit = locate_unit(p, u);
  int* s_cursor = s_unit + static_cast<std::int64_t>(warp) * p.max_blocks;
  const std::int32_t* g_row_of = p.row_of + static_cast<std::int64_t>(unit.b) * p.max_blocks;
  const std::int32_t* g_row_ptr = p.row_ptr + static_cast<std::int64_t>(h) * (p.max_rows + 1);
  const std::int32_t* g_prefix = p.unit_counts + (static_cast<std::int64_t>(h) * p.max_units + u) * p.max_blocks;
  for (int l = lane; l < unit.blocks; l += 32) s_cursor[l] = g_row_ptr[g_row_of[l]] + g_prefix[l];
  __syncwarp();
  scatter_passes(p, h, unit, s_cursor, lane);
}

// ---- stage 5: the qsplit tail; the routed tiles' list ----------------------------------------

// CTAs: list_ctas (0 or 1) listing the routed tiles (compact_route_list; nothing in the plan
// reads the list, so it runs beside the tail rather than as the finalize launch's longest CTA,
// step 44; the bitmap path lists them beside its walk instead), then tail_ctas sharing every
// head's tail.

__global__ void __launch_bounds__(kTailThreads) k2q_finish_kernel(const BuildParams p, int list_ctas, int tail_ctas) {
  __shared__ typename cub::BlockScan<int, kTailThreads>::TempStorage list_scan;
  __shared__ int s_used[kTailThreads];  // edges of each head of the current group
  int cta = static_cast<int>(blockIdx.x);
  if (cta < list_ctas) {  // CTA-uniform
    compact_route_list<kTailThreads, kRouteListItems>(p.union_tile, p.route_per_head, p.h_kv, p.union_list,
                                                      p.union_count, p.combine_list, p.combine_count, list_scan);
    return;
  }
  // Every tail CTA strides over every head's tail (tails are data dependent: a few words of most
  // heads, or whole heads where every tile is routed), the heads' edge counts loaded kTailThreads
  // at a time.
  const int x = cta - list_ctas;
  const std::int64_t stride = static_cast<std::int64_t>(p.max_rows) + 1;
  for (int h0 = 0; h0 < p.h_kv; h0 += kTailThreads) {
    const int hh = h0 + static_cast<int>(threadIdx.x);
    if (hh < p.h_kv) s_used[threadIdx.x] = min(max(p.row_ptr[hh * stride + p.max_rows], 0), p.edges_per_head);
    __syncthreads();
    for (int h = h0; h < min(h0 + kTailThreads, p.h_kv); ++h) {
      std::int32_t* g_qsplit = p.qsplit + static_cast<std::int64_t>(h) * p.edges_per_head;
      for (std::int64_t i = s_used[h - h0] + static_cast<std::int64_t>(x) * kTailThreads + threadIdx.x;
           i < p.edges_per_head; i += static_cast<std::int64_t>(tail_ctas) * kTailThreads)
        g_qsplit[i] = qsplit::kUnused;
    }
    __syncthreads();  // s_used is reloaded
  }
}

}  // namespace msa::cuda::k2q
