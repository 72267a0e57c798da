// The device k2q planner's fused path: the general path's passes in one cooperative launch, for
// chunks of hundreds to thousands of queries (k2q_fused_fits; k2q_device_sizes decides where
// it is taken). The general path pays eight launches, and the grid path has every CTA read
// every query of its head, which costs more than those launches from about 700 queries
// (docs/performance.md, step 41). Here each query is read by one CTA (twice: to count and to
// place), and grid-wide barriers (cooperative_groups) stand where the general path's kernel
// boundaries stood.
//
// Work is handed out in virtual tasks (task t runs on CTA t % gridDim.x, in turn), so any grid
// size is correct; the launch asks for h_kv * tasks_per_head CTAs, one more when the planner
// routes, or fewer where the device holds fewer at once. Two kinds of task:
//   - a unit task (KV head h, unit u): u is <= q_per_unit consecutive queries of one request,
//     split among the CTA's warps in contiguous sub-ranges (a warp's counters per block in
//     shared memory, as a count warp of the general path);
//   - a row task (KV head h, range r of the head's rows): ceil(total_rows / tasks_per_head)
//     consecutive rows of the level-major row order.
// Phases (| = grid barrier):
//   0. row map (row_coords, a thread per level; nothing in the launch reads it)
//   1. per unit task: when the planner routes, the routing of the tiles its queries are in (a
//      warp per tile: route_tile), then its counts per block (the sum of its warps') into
//      unit_counts, and split_counts |
//   2. per row task: each row's exclusive prefix along its request's units (in place) and the
//      row's (edges, items); the task's total into task_totals |
//   3. per row task: the prefix of the task totals before it (this head's edges, every head's
//      items), then row_ptr and the work items of its rows; row_ptr's padding past the last row
//      (the head's edge total), and its share of the qsplit tail (unused) past the head's last
//      edge |
//   4. scatter: per unit task, the warps count again, and each warp's cursor per block is
//      row_ptr + the unit's prefix + the warps' before it; each warp places its queries in
//      order (the general path's scatter), writing qsplit. The last CTA (a spare
//      one where the device holds it) then lists the routed tiles.
// Where the routing decided for the call routes every tile, no row has an edge: after phase 1
// the CTAs write the plan phases 2-4 would leave (row_ptr 0, qsplit unused, no work item), the
// last one lists the tiles, and the launch ends there (docs/performance.md, step 81).
// Every row is q-ascending, as the host's sequential writer leaves it, so the plan is the same
// byte for byte as the other paths'.
//
// A tile whose queries fall in two units is routed by both tasks, which write the same flag. A
// unit task reads only the flags of its own tiles (after a CTA barrier), in phases 1 and 4; the
// tile list reads every flag after a grid barrier, at L2. Each tile is in some unit where the
// requests cover the queries, as the contract has it (a tile no unit holds keeps whatever flag
// it had).
//
// Every CTA keeps the first row of each level in shared memory, so rows and their (request,
// level) are computed, not loaded. A CTA with at most one unit task keeps its warps' counters
// from the count to the scatter, and one with at most one row task keeps its rows' totals
// (one row per thread) from phase 2 to phase 3. What one CTA wrote and another reads after a
// barrier is loaded with __ldcg (at L2, never a line the reader's L1 kept from an earlier phase).
//
// Included by k2q_device.cu only. Uses k2q_kernels.cuh (request_queries, request_blocks, Unit,
// count_passes and scatter_passes, which the general path's count and scatter warps run too,
// task_base, row totals).
#pragma once

#include <cooperative_groups.h>

#include <cstdint>
#include <cub/block/block_scan.cuh>

#include "core/plan_encoding.h"
#include "core/tile_route.h"
#include "cuda/plan/k2q_kernels.cuh"
#include "cuda/plan/k2q_params.h"
#include "cuda/plan/tile_keys.cuh"
#include "cuda/plan/tile_route.cuh"

namespace msa::cuda::k2q {

// A fused CTA's dynamic shared memory: kFusedWarps counters per block of the longest request, or
// the routing warps' tables when the planner routes (route_entries = q_per_tile * topk; 0: no
// routing), whichever is larger; then the first row of each level [max_blocks + 1] int.
struct FusedSmem {
  std::size_t level_off;  // bytes
  std::size_t bytes;
};
MSA_HOST_DEVICE FusedSmem fused_smem(std::int64_t max_blocks, int route_entries) {
  const std::size_t counters = static_cast<std::size_t>(kFusedWarps) * static_cast<std::size_t>(max_blocks) * 4;
  const std::size_t route = route_entries > 0 ? route_cta_smem_bytes(route_entries) : 0;
  const std::size_t first = ((route > counters ? route : counters) + 15) / 16 * 16;
  return FusedSmem{first, first + 4 * static_cast<std::size_t>(max_blocks + 1)};
}

// The row of (request b, level l < rows_b): the level's first row, then request-minor.
__device__ __forceinline__ int fused_row_of(const int* s_level_start, const int* s_rows, int b, int l) {
  int row = s_level_start[l];
  for (int c = 0; c < b; ++c) row += s_rows[c] > l ? 1 : 0;
  return row;
}

// The (request, level) of row `row` < total_rows, as b << 20 | level: its level is the last one
// starting at or before it (levels with rows start strictly later than the one before), its
// request the n-th of that level's.
__device__ __forceinline__ int fused_coord_of(const int* s_level_start, const int* s_rows, int batch, int max_blocks,
                                              int row) {
  const int l = last_at_most(s_level_start, max_blocks, row);
  int nth = row - s_level_start[l];
  int b = 0;
  for (; b < batch; ++b) {
    if (s_rows[b] <= l) continue;
    if (nth == 0) break;
    --nth;
  }
  return (b << 20) | l;
}

// Unit u (< s_unit_start[batch]): its request b and its queries [q0, q1) (q0 < q1).
struct FusedUnitQueries {
  int b;
  int q0;
  int q1;
};
__device__ __forceinline__ FusedUnitQueries fused_unit_queries(const BuildParams& p, const int* s_unit_start,
                                                               const int* s_begin, const int* s_end, int u) {
  const int b = last_at_most(s_unit_start, p.batch, u);
  const int q0 = s_begin[b] + (u - s_unit_start[b]) * p.q_per_unit;
  return FusedUnitQueries{b, q0, min(q0 + p.q_per_unit, s_end[b])};
}

// Warp `warp`'s share of unit u (< s_unit_start[batch]), as a Unit of its own queries: sub-ranges
// of whole passes, in query order across the warps (the scatter's cursors rely on that order).
__device__ __forceinline__ Unit fused_unit(const BuildParams& p, const int* s_unit_start, const int* s_begin,
                                           const int* s_end, const int* s_rows, int u, int warp) {
  const FusedUnitQueries uq = fused_unit_queries(p, s_unit_start, s_begin, s_end, u);
  const int b = uq.b, q0 = uq.q0, q1 = uq.q1;
  const int per_pass = 32 >> p.log_topk_pow2;
  const int passes = (q1 - q0 + per_pass - 1) / per_pass;
  const int warp_passes = (passes + kFusedWarps - 1) / kFusedWarps;
  Unit un;
  un.b = b;
  un.q_request = s_begin[b];
  un.q_begin = min(q0 + warp * warp_passes * per_pass, q1);
  un.q_end = min(un.q_begin + warp_passes * per_pass, q1);
  un.blocks = s_rows[b];
  return un;
}

// One warp's counts per block of its share (zeroed here first); kSplit: also its queries' split
// counts. Warp-collective.
template <bool kSplit>
__device__ __forceinline__ void fused_count_warp(const BuildParams& p, int h, Unit un, int* s_hist, int lane) {
  for (int l = lane; l < un.blocks; l += 32) s_hist[l] = 0;
  __syncwarp();
  count_passes<kSplit>(p, h, un, s_hist, lane);
  __syncwarp();  // shared-memory atomics visible to every lane
}

// The rows [row0, row1) of row task r of a head, of total_rows rows.
struct FusedRows {
  int row0;
  int row1;
};
__device__ __forceinline__ FusedRows fused_rows(int total_rows, int per_head, int r) {
  const int per_task = (total_rows + per_head - 1) / per_head;
  const int row0 = min(r * per_task, total_rows);
  return FusedRows{row0, min(row0 + per_task, total_rows)};
}

__global__ void __launch_bounds__(kFusedThreads, 1)
    k2q_fused_kernel(const BuildParams p, const TileRouteParams route, int route_on) {
  namespace cg = cooperative_groups;
  using PairScan = cub::BlockScan<K2qRowTotal, kFusedThreads>;
  using IntScan = cub::BlockScan<int, kFusedThreads>;
  __shared__ union {
    PairScan::TempStorage pair;
    IntScan::TempStorage single;
  } scan_tmp;
  __shared__ int s_begin[kFusedMaxBatch], s_end[kFusedMaxBatch], s_rows[kFusedMaxBatch];
  __shared__ int s_unit_start[kFusedMaxBatch + 1];
  __shared__ int s_total_rows;
  __shared__ TaskBase s_base;  // phase 3
  // Phase 3, one chunk of kFusedThreads rows at a time: each row's first edge, edges, first
  // item (chunk-local) and (b << 20 | block).
  __shared__ int s_row_begin[kFusedThreads], s_row_edges[kFusedThreads], s_row_item[kFusedThreads],
      s_row_coord[kFusedThreads];
  extern __shared__ __align__(16) unsigned char s_dyn[];
  int* s_count = reinterpret_cast<int*>(s_dyn);  // [kFusedWarps, max_blocks]
  const FusedSmem smem = fused_smem(p.max_blocks, route_on ? route.q_per_tile * route.topk : 0);
  int* s_level_start = reinterpret_cast<int*>(s_dyn + smem.level_off);  // [max_blocks + 1]

  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int ctas = static_cast<int>(gridDim.x);
  const int cta = static_cast<int>(blockIdx.x);
  const int per_head = p.tasks_per_head;
  const int row_tasks = p.h_kv * per_head;  // <= kGridMaxTasks (k2q_fused_fits)

  // Requests, in every CTA: query ranges, blocks, and the exclusive prefix of their units
  // (clamped to max_units, as the general path's row map does).
  if (tid < p.batch) {
    const QueryRange qr = request_queries(p, tid);
    s_begin[tid] = qr.begin;
    s_end[tid] = qr.end;
    s_rows[tid] = request_blocks(p, tid);
  }
  __syncthreads();
  if (warp == 0) {
    // Lane i holds requests i and i + 32 (batch <= 64).
    int units[2], rows = 0;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int b = lane + 32 * k;
      units[k] = b < p.batch ? (s_end[b] - s_begin[b] + p.q_per_unit - 1) / p.q_per_unit : 0;
      rows += b < p.batch ? s_rows[b] : 0;
    }
    int carry = 0;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      int inc = units[k];
      for (int off = 1; off < 32; off <<= 1) {
        const int v = __shfl_up_sync(kFullMask, inc, off);
        if (lane >= off) inc += v;
      }
      const int b = lane + 32 * k;
      if (b < p.batch) s_unit_start[b] = min(carry + inc - units[k], p.max_units);
      carry += __shfl_sync(kFullMask, inc, 31);
    }
    for (int off = 16; off > 0; off >>= 1) rows += __shfl_xor_sync(kFullMask, rows, off);
    if (lane == 0) {
      s_unit_start[p.batch] = min(carry, p.max_units);
      s_total_rows = rows;
    }
  }
  // Rows of level l start at sum_b min(rows_b, l) (every CTA, in shared memory).
  for (int l = tid; l <= p.max_blocks; l += kFusedThreads) {
    int row = 0;
    for (int b = 0; b < p.batch; ++b) row += min(s_rows[b], l);
    s_level_start[l] = row;
  }
  __syncthreads();
  const int total_rows = s_total_rows;
  const int units = s_unit_start[p.batch];
  const std::int64_t stride = static_cast<std::int64_t>(p.max_rows) + 1;
  const bool keep_counts = p.h_kv * units <= ctas;  // the scatter's unit task is the count's
  // Phase 3's row task is phase 2's, and its rows are one chunk (a row per thread).
  const bool keep_totals = row_tasks <= ctas && (total_rows + per_head - 1) / per_head <= kFusedThreads;

  // 0. Row map: a thread per level, its rows request-minor.
  for (int l = cta * kFusedThreads + tid; l < p.max_blocks; l += ctas * kFusedThreads) {
    int row = s_level_start[l];
    for (int b = 0; b < p.batch; ++b) {
      if (s_rows[b] <= l) continue;
      p.row_coords[2 * static_cast<std::int64_t>(row)] = b;
      p.row_coords[2 * static_cast<std::int64_t>(row) + 1] = l;
      ++row;
    }
  }

  // 1. Routing and count: each unit task routes the tiles its queries are in (a warp per tile),
  // then counts the unit's edges per block, the sum of its warps' counters. Decided for the call
  // (route.call_slots): every unit task routes first, summing the candidates whose first query
  // is its own (a tile two units share counts once); after a barrier every CTA takes the same
  // decision and, where the call does not route, clears its own tasks' flags before it counts.
  int* s_hist = s_count + static_cast<std::int64_t>(warp) * p.max_blocks;
  const bool call = route_on && route.call_slots != nullptr;
  RouteSums mine;
  bool all_routed = false;  // the call routes every tile: no row has an edge
  // Pass 0 routes and counts, and ends at the phase's barrier. Decided for the call, each CTA
  // has written its candidates' sums by then; where the call has candidates but does not route
  // them, pass 1 clears each CTA's own tasks' flags and counts those units again, behind a
  // barrier more. Random selections (no candidate) and calls that route pay only the sums.
  // The decision is the same in every CTA, so every CTA leaves the loop at the same pass.
#pragma unroll 1
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) {
      if (!call) break;
      const RouteSums all = route_call_total(route, ctas);
      const std::int64_t tiles = tiles_per_head(p.total_q, route.q_per_tile);
      if (all.tiles == 0) break;
      if (route_call_pays(all.tiles, all.unions, all.edges, route.group)) {
        all_routed = all.tiles == static_cast<unsigned long long>(p.h_kv * tiles);
        break;
      }
      for (int t = cta; t < p.h_kv * units; t += ctas) {
        const int h = t / units, u = t - h * units;
        const FusedUnitQueries uq = fused_unit_queries(p, s_unit_start, s_begin, s_end, u);
        for (int i = uq.q0 / route.q_per_tile + tid; i <= (uq.q1 - 1) / route.q_per_tile; i += kFusedThreads)
          route.union_tile[h * tiles + i] = 0;
      }
      __syncthreads();  // the flags final (the count reads its own tasks')
    }
    for (int t = cta; t < p.h_kv * units; t += ctas) {
      const int h = t / units, u = t - h * units;
      if (route_on && pass == 0) {
        const FusedUnitQueries uq = fused_unit_queries(p, s_unit_start, s_begin, s_end, u);
        const std::int64_t tiles = tiles_per_head(p.total_q, route.q_per_tile);
        const int entries = route.q_per_tile * route.topk;
        std::int32_t* s_key = reinterpret_cast<std::int32_t*>(s_dyn) + warp * route_warp_ints(entries);
        for (int i = uq.q0 / route.q_per_tile + warp; i <= (uq.q1 - 1) / route.q_per_tile; i += kFusedWarps) {
          const RoutedTile r = route_tile<16>(route, h * tiles + i, tiles, lane, s_key, s_key + entries);
          if (static_cast<std::int64_t>(i) * route.q_per_tile >= uq.q0) mine.add(r);  // its first query's unit
        }
        __syncthreads();  // the flags written (the count reads them), the tables free
      }
      const Unit un = fused_unit(p, s_unit_start, s_begin, s_end, s_rows, u, warp);
      fused_count_warp<true>(p, h, un, s_hist, lane);
      __syncthreads();
      std::int32_t* g_counts = p.unit_counts + (static_cast<std::int64_t>(h) * p.max_units + u) * p.max_blocks;
      for (int l = tid; l < un.blocks; l += kFusedThreads) {
        int sum = 0;
#pragma unroll
        for (int w = 0; w < kFusedWarps; ++w) sum += s_count[w * p.max_blocks + l];
        g_counts[l] = sum;
      }
      __syncthreads();  // the counters are reused
    }
    if (call && pass == 0) route_call_slot_write(route, cta, mine);
    cg::this_grid().sync();
  }

  // Every tile routed: every count was 0, so phases 2-4 would leave row_ptr 0 through max_rows,
  // every qsplit word unused and no work item. Write that plan, list the tiles, and end.
  if (all_routed) {
    const std::int64_t row_words = static_cast<std::int64_t>(p.h_kv) * stride;
    const std::int64_t split_words = static_cast<std::int64_t>(p.h_kv) * p.edges_per_head;
    for (std::int64_t i = static_cast<std::int64_t>(cta) * kFusedThreads + tid; i < row_words + split_words;
         i += static_cast<std::int64_t>(ctas) * kFusedThreads) {
      if (i < row_words)
        p.row_ptr[i] = 0;
      else
        p.qsplit[i - row_words] = qsplit::kUnused;
    }
    if (cta == 0 && tid == 0) {
      *p.total_rows = total_rows;
      *p.work_count = 0;
    }
    if (cta == ctas - 1)
      compact_route_list<kFusedThreads, 8, true>(
          route.union_tile, static_cast<int>(tiles_per_head(p.total_q, route.q_per_tile)), p.h_kv, p.union_list,
          p.union_count, p.combine_list, p.combine_count, scan_tmp.single);
    return;
  }

  // 2. Per row: the exclusive prefix of its counts along its request's units, and its (edges,
  // items); per row task: the total.
  const int qpi = p.q_per_item;
  K2qRowTotal kept_total = 0;  // keep_totals: this thread's row of the CTA's row task
  for (int t = cta; t < row_tasks; t += ctas) {
    const int h = t / per_head, r = t - h * per_head;
    const FusedRows rows = fused_rows(total_rows, per_head, r);
    K2qRowTotal mine = 0;
    for (int row = rows.row0 + tid; row < rows.row1; row += kFusedThreads) {
      const int coord = fused_coord_of(s_level_start, s_rows, p.batch, p.max_blocks, row);
      const int b = coord >> 20, l = coord & 0xfffff;
      const int u0 = s_unit_start[b], u1 = s_unit_start[b + 1];
      std::int32_t* g_col = p.unit_counts + static_cast<std::int64_t>(h) * p.max_units * p.max_blocks + l;
      int run = 0;
      for (int u = u0; u < u1; u += kFusedPrefixBatch) {  // usually one batch: one round trip
        int v[kFusedPrefixBatch];
#pragma unroll
        for (int k = 0; k < kFusedPrefixBatch; ++k)
          v[k] = u + k < u1 ? __ldcg(g_col + static_cast<std::int64_t>(u + k) * p.max_blocks) : 0;
#pragma unroll
        for (int k = 0; k < kFusedPrefixBatch; ++k) {
          if (u + k < u1) g_col[static_cast<std::int64_t>(u + k) * p.max_blocks] = run;
          run += v[k];
        }
      }
      const unsigned edges = static_cast<unsigned>(run);
      const K2qRowTotal total =
          row_total(edges, (edges + static_cast<unsigned>(qpi) - 1u) / static_cast<unsigned>(qpi));
      if (!keep_totals) p.row_totals[h * stride + row] = total;
      kept_total = total;
      mine += total;
    }
    K2qRowTotal ex = 0, agg = 0;
    PairScan(scan_tmp.pair).ExclusiveSum(mine, ex, agg);
    if (tid == 0) p.task_totals[t] = agg;
    __syncthreads();  // scan_tmp is reused
  }
  cg::this_grid().sync();

  // 3. Per row task: row_ptr and the work items of its rows, kFusedThreads rows at a time.
  for (int t = cta; t < row_tasks; t += ctas) {
    const int h = t / per_head, r = t - h * per_head;
    const FusedRows rows = fused_rows(total_rows, per_head, r);
    // This thread's first row's total, loaded before the task totals are summed.
    K2qRowTotal first_total = 0;
    if (rows.row0 + tid < rows.row1)
      first_total = keep_totals ? kept_total : __ldcg(p.row_totals + h * stride + rows.row0 + tid);
    if (warp == 0) {  // the tasks before this one: edges of this head's, items of all
      const TaskBase base = task_base(p.task_totals, row_tasks, t, per_head, lane);
      if (lane == 0) s_base = base;
    }
    __syncthreads();
    const int head_edges = static_cast<int>(s_base.head_edges);
    std::int32_t* g_row_ptr = p.row_ptr + h * stride;
    int edge_carry = static_cast<int>(s_base.edge_base);
    long long item_carry = static_cast<long long>(s_base.item_base);
    for (int base = rows.row0; base < rows.row1; base += kFusedThreads) {
      const int row = base + tid;
      const int n = min(kFusedThreads, rows.row1 - base);
      const K2qRowTotal mine = row >= rows.row1    ? 0
                               : base == rows.row0 ? first_total
                                                   : __ldcg(p.row_totals + h * stride + row);
      K2qRowTotal ex = 0, agg = 0;
      PairScan(scan_tmp.pair).ExclusiveSum(mine, ex, agg);
      if (row < rows.row1) {
        const int begin = edge_carry + static_cast<int>(total_edges(ex));
        g_row_ptr[row] = begin;
        s_row_begin[tid] = begin;
        s_row_edges[tid] = static_cast<int>(total_edges(mine));
        s_row_item[tid] = static_cast<int>(total_items(ex));
        s_row_coord[tid] = fused_coord_of(s_level_start, s_rows, p.batch, p.max_blocks, row);
      }
      __syncthreads();
      const int chunk_items = static_cast<int>(total_items(agg));
      for (int k = tid; k < chunk_items; k += kFusedThreads) {
        const int i = last_at_most(s_row_item, n, k);
        const int first = (k - s_row_item[i]) * qpi;
        const long long w = item_carry + k;
        const int coord = s_row_coord[i];
        const ItemSpan span = item_span(p, s_row_begin[i] + first, min(qpi, s_row_edges[i] - first));
        if (w < p.work_capacity)
          p.work[w] = WorkItem{h, base + i, span.q_begin, span.q_count, coord >> 20, coord & 0xfffff};
      }
      edge_carry += static_cast<int>(total_edges(agg));
      item_carry += chunk_items;
      __syncthreads();  // scan_tmp and the chunk's arrays are reused
    }
    if (r == per_head - 1)  // past the head's last row, row_ptr holds its edge total
      for (int row = total_rows + tid; row <= p.max_rows; row += kFusedThreads) g_row_ptr[row] = head_edges;
    // The tail past the head's last edge (usually none: every top-k slot an edge), a share per
    // row task; the scatter writes below it.
    const std::int64_t used = min(max(head_edges, 0), p.edges_per_head);
    std::int32_t* g_qsplit = p.qsplit + h * p.edges_per_head;
    for (std::int64_t i = used + static_cast<std::int64_t>(r) * kFusedThreads + tid; i < p.edges_per_head;
         i += static_cast<std::int64_t>(per_head) * kFusedThreads)
      g_qsplit[i] = qsplit::kUnused;
    if (t == 0 && tid == 0) {
      *p.total_rows = total_rows;
      *p.work_count = static_cast<int>(min(s_base.items, static_cast<unsigned long long>(p.work_capacity)));
    }
    __syncthreads();  // s_base is reused
  }
  cg::this_grid().sync();

  // 4. Scatter: each warp's cursors, then its queries in order.
  for (int t = cta; t < p.h_kv * units; t += ctas) {
    const int h = t / units, u = t - h * units;
    const Unit un = fused_unit(p, s_unit_start, s_begin, s_end, s_rows, u, warp);
    if (!keep_counts) {
      fused_count_warp<false>(p, h, un, s_hist, lane);
      __syncthreads();
    }
    // Each block's first place: row_ptr of its row + the unit's prefix, loaded for
    // kFusedCursorBatch blocks per thread before any is used; then the warps' cursors in turn.
    const std::int32_t* g_prefix = p.unit_counts + (static_cast<std::int64_t>(h) * p.max_units + u) * p.max_blocks;
    const std::int32_t* g_row_ptr = p.row_ptr + h * stride;
    for (int l0 = tid; l0 < un.blocks; l0 += kFusedThreads * kFusedCursorBatch) {
      int first[kFusedCursorBatch];
#pragma unroll
      for (int k = 0; k < kFusedCursorBatch; ++k) {
        const int l = l0 + k * kFusedThreads;
        first[k] =
            l < un.blocks ? __ldcg(g_row_ptr + fused_row_of(s_level_start, s_rows, un.b, l)) + __ldcg(g_prefix + l) : 0;
      }
#pragma unroll
      for (int k = 0; k < kFusedCursorBatch; ++k) {
        const int l = l0 + k * kFusedThreads;
        if (l >= un.blocks) break;
        int cursor = first[k];
#pragma unroll
        for (int w = 0; w < kFusedWarps; ++w) {
          const int c = s_count[w * p.max_blocks + l];
          s_count[w * p.max_blocks + l] = cursor;
          cursor += c;
        }
      }
    }
    __syncthreads();

    scatter_passes(p, h, un, s_hist, lane);
    __syncthreads();  // the cursors are reused
  }
  // The routed tiles' list, which nothing in the launch reads, on the last CTA (a spare one
  // without a unit task where the device holds it).
  if (route_on && cta == ctas - 1)
    compact_route_list<kFusedThreads, 8, true>(
        route.union_tile, static_cast<int>(tiles_per_head(p.total_q, route.q_per_tile)), p.h_kv, p.union_list,
        p.union_count, p.combine_list, p.combine_count, scan_tmp.single);
}

}  // namespace msa::cuda::k2q
