// The device k2q planner's grid path: the whole plan in one cooperative launch, for problems of
// up to a few thousand queries (k2q_grid_fits; k2q_device_sizes decides where it is taken). The
// small path does a KV head's work on one SM and the general path takes eight launches; this
// path spreads the work over h_kv * tasks_per_head CTAs and orders it with one or two grid-wide
// barriers (cooperative_groups), so that a small chunk's plan costs about one launch.
//
// A task (one CTA) owns a KV head h and a range of levels [l0, l1): the rows of every request's
// blocks at those levels, which are consecutive in the row order (level-major, request-minor),
// at most kGridTaskRows of them. Every task reads every query of its head (a thread per query,
// its top-k ids in registers) and keeps the edges that land on its own rows, so a row's edges
// are all found by the CTA that owns it and need no cross-CTA merge:
//
//   A. routing (when the planner routes): route_cta's warps flag the tiles (tile_route.cuh);
//      barrier. The last CTA then lists the flagged tiles (compact_route_list).
//   B. count: each task's edges per row (shared-memory atomics) and its split counts (queries
//      q with q % tasks_per_head == the task's range index); the task's (edges, items) total;
//      barrier.
//   C. finish: the prefix of the task totals before this task gives its rows' row_ptr and work
//      items; rows are mapped (row_coords); then placement, kGridThreads queries per round:
//      each row's mask of the round's queries ranks an edge among the round's, so every row is
//      q-ascending as the host's sequential writer leaves it; and the -1 tail.
//
// Included by k2q_device.cu only. Uses k2q_kernels.cuh (request_queries, request_blocks,
// routed_row, row_total, task_base) and k2q_small_kernels.cuh (small_request_of).
#pragma once

#include <cooperative_groups.h>

#include <cstdint>
#include <cub/block/block_scan.cuh>

#include "core/plan_encoding.h"
#include "core/tile_route.h"
#include "cuda/plan/k2q_kernels.cuh"
#include "cuda/plan/k2q_params.h"
#include "cuda/plan/k2q_small_kernels.cuh"
#include "cuda/plan/tile_keys.cuh"
#include "cuda/plan/tile_route.cuh"

namespace msa::cuda::k2q {

// Bytes of a grid CTA's dynamic shared memory: the task's arrays, or the routing warps' tables
// when the planner routes (route_entries = q_per_tile * topk; 0: no routing), whichever is larger.
MSA_HOST_DEVICE std::size_t grid_smem_bytes(int route_entries) {
  const std::size_t route = route_entries > 0 ? route_cta_smem_bytes(route_entries) : 0;
  return route > sizeof(GridTaskSmem) ? route : sizeof(GridTaskSmem);
}

// One query's top-k ids, held by one thread (unused slots -1); kK >= topk (16 or 32).
template <int kK>
struct GridQuery {
  int ids[kK];
  int b;        // request, -1 for none (the query then has no edge)
  int blocks;   // rows_b, or 0 when the query has no edge here (no request, or routed)
  bool routed;  // its tile is the tile-union kernel's: no edge, split count 1
};

// The flag and the ids are loaded together (one memory round trip); a routed query's ids are
// then ignored (blocks 0). routes: the call routes its flagged tiles (false where the routing decided for the call
// cleared them: the flags are then not read).
template <int kK>
__device__ __forceinline__ GridQuery<kK> grid_load_query(const BuildParams& p, const int* s_begin, const int* s_end,
                                                         const int* s_rows, int h, int q, bool routes) {
  GridQuery<kK> g;
  g.b = q < p.total_q ? small_request_of(s_begin, s_end, p.batch, q) : -1;
  g.routed = routes && q < p.total_q && routed_row(p, h, q);
  const std::int32_t* row = p.topk_ids + h * p.stride_topk_head + static_cast<std::int64_t>(q) * p.stride_topk_token;
#pragma unroll
  for (int j = 0; j < kK; ++j) g.ids[j] = g.b >= 0 && j < p.topk ? __ldg(row + j) : -1;
  g.blocks = g.b >= 0 && !g.routed ? s_rows[g.b] : 0;
  return g;
}

// Bit j: id j is kept (in [0, blocks), and no lower slot holds it).
template <int kK>
__device__ __forceinline__ unsigned grid_keep_mask(const GridQuery<kK>& g) {
  unsigned keep = 0;
#pragma unroll
  for (int j = 0; j < kK; ++j) {
    const int v = g.ids[j];
    bool k = v >= 0 && v < g.blocks;
#pragma unroll
    for (int i = 0; i < j; ++i) k &= g.ids[i] != v;
    keep |= (k ? 1u : 0u) << j;
  }
  return keep;
}

// Id j of the query (j < kK), picked from its registers by a select chain: the loops over a
// query's edges stay loops, so the kernel's code stays small (unrolled over kK ids, they made
// it 13-22 thousand instructions, whose one pass a launch waited on instruction fetch;
// docs/performance.md, step 72).
template <int kK>
__device__ __forceinline__ int grid_id(const GridQuery<kK>& g, int j) {
  int v = g.ids[0];
#pragma unroll
  for (int k = 1; k < kK; ++k) v = k == j ? g.ids[k] : v;
  return v;
}

// The slot of kept id `id`: the number of kept ids below it (kept ids are distinct).
template <int kK>
__device__ __forceinline__ int grid_slot(const GridQuery<kK>& g, unsigned keep, int id) {
  int slot = 0;
#pragma unroll
  for (int i = 0; i < kK; ++i) slot += (keep >> i & 1u) != 0u && g.ids[i] < id ? 1 : 0;
  return slot;
}

// Slots j whose id lies in the task's levels [l0, l1) (and below the request's blocks): the only
// ones that can be this task's edges.
template <int kK>
__device__ __forceinline__ unsigned grid_in_task(const GridQuery<kK>& g, int l0, int l1) {
  unsigned in = 0;
#pragma unroll
  for (int j = 0; j < kK; ++j) {
    const int v = g.ids[j];
    in |= (v >= l0 && v < l1 && v < g.blocks ? 1u : 0u) << j;
  }
  return in;
}

// The task row of (request b, level l) with l in the task's levels.
__device__ __forceinline__ int grid_task_row(const GridTaskSmem& s, int b, int l0, int l) {
  const unsigned long long below = b == 0 ? 0ull : s.level_requests[l - l0] & (~0ull >> (64 - b));
  return s.level_row[l - l0] - s.level_row[0] + __popcll(below);
}

// kK: ids held per query (16 where topk <= 16, else 32).
template <int kK>
__global__ void __launch_bounds__(kGridThreads, 2)
    k2q_grid_kernel(const BuildParams p, const TileRouteParams route, int route_on) {
  namespace cg = cooperative_groups;
  using PairScan = cub::BlockScan<K2qRowTotal, kGridThreads>;
  using IntScan = cub::BlockScan<int, kGridThreads>;
  __shared__ union {
    PairScan::TempStorage pair;
    IntScan::TempStorage single;
  } scan_tmp;
  __shared__ int s_begin[kGridMaxBatch], s_end[kGridMaxBatch], s_rows[kGridMaxBatch];
  __shared__ int s_levels, s_total_rows;
  __shared__ TaskBase s_base;
  extern __shared__ __align__(16) unsigned char s_dyn[];
  GridTaskSmem& s = *reinterpret_cast<GridTaskSmem*>(s_dyn);

  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int n_tasks = static_cast<int>(gridDim.x);
  const int task = static_cast<int>(blockIdx.x);
  const int per_head = p.tasks_per_head;
  const int h = task / per_head, r = task - h * per_head;

  if (tid < p.batch) {
    const QueryRange qr = request_queries(p, tid);
    s_begin[tid] = qr.begin;
    s_end[tid] = qr.end;
    s_rows[tid] = request_blocks(p, tid);
  }
  __syncthreads();
  if (warp == 0) {
    int levels = 0, rows = 0;
    for (int b = lane; b < p.batch; b += 32) {
      levels = max(levels, s_rows[b]);
      rows += s_rows[b];
    }
    for (int off = 16; off > 0; off >>= 1) {
      levels = max(levels, __shfl_xor_sync(kFullMask, levels, off));
      rows += __shfl_xor_sync(kFullMask, rows, off);
    }
    if (lane == 0) {
      s_levels = levels;
      s_total_rows = rows;
    }
  }

  // A. Routing: the flags first (every task's count reads them), then their list. Decided for
  // the call (route.call_slots): each CTA's candidates' sums, and after the barrier every CTA
  // takes the same decision; where the call does not route, the counts read no flag and the
  // last CTA clears them all before it lists.
  // Flags given as input (K2qDeviceInputs::union_tile, route_on 0) are honoured as well.
  bool routes = route_on != 0 || p.union_tile != nullptr;
  if (route_on) {
    const bool call = route.call_slots != nullptr;
    const RouteSums mine = route_cta_fit(route, task, n_tasks, reinterpret_cast<std::int32_t*>(s_dyn));
    if (call) route_call_slot_write(route, task, mine);
    cg::this_grid().sync();
    if (call) routes = route_call_decide(route, n_tasks);
    if (task == n_tasks - 1) {
      const int per_tile_head = static_cast<int>(tiles_per_head(p.total_q, route.q_per_tile));
      if (!routes) {
        for (std::int64_t t = tid; t < static_cast<std::int64_t>(per_tile_head) * p.h_kv; t += kGridThreads)
          route.union_tile[t] = 0;
        __syncthreads();
      }
      compact_route_list<kGridThreads, 8>(route.union_tile, per_tile_head, p.h_kv, p.union_list, p.union_count,
                                          p.combine_list, p.combine_count, scan_tmp.single);
    }
  }
  __syncthreads();  // s_levels; the routing tables and scan_tmp are free

  // The task's levels and rows.
  const int levels = s_levels;
  const int per_task = (levels + per_head - 1) / per_head;
  const int l0 = min(r * per_task, levels), l1 = min(l0 + per_task, levels);
  const int n_levels = l1 - l0;  // <= kGridTaskRows (k2q_grid_fits)
  for (int i = tid; i <= n_levels; i += kGridThreads) {
    const int l = l0 + i;
    int start = 0;
    unsigned long long has = 0;
    for (int b = 0; b < p.batch; ++b) {
      start += min(s_rows[b], l);
      if (s_rows[b] > l) has |= 1ull << b;
    }
    s.level_row[i] = start;
    if (i < n_levels) s.level_requests[i] = has;
  }
  for (int i = tid; i < kGridTaskRows; i += kGridThreads) s.edges[i] = 0;
  for (int i = tid; i < kGridTaskRows * kGridMaskWords; i += kGridThreads) s.mask[i] = 0;
  __syncthreads();
  const int row0 = s.level_row[0];
  const int n_rows = s.level_row[n_levels] - row0;  // <= kGridTaskRows (k2q_grid_fits)

  // B. Count: this task's edges per row, and the split counts of its share of the queries. When
  // one round holds every query, each thread keeps its query for the placement (not its edges:
  // the 32-id instance would spill them).
  const bool one_round = p.total_q <= kGridThreads;
  GridQuery<kK> own;
  for (int base = 0; base < p.total_q; base += kGridThreads) {
    const int q = base + tid;
    if (q >= p.total_q) break;
    const GridQuery<kK> g = grid_load_query<kK>(p, s_begin, s_end, s_rows, h, q, routes);
    if (one_round) own = g;
    const unsigned in = grid_in_task(g, l0, l1);
    const bool counts_split = q % per_head == r;
    if (in == 0u && !counts_split) continue;
    const unsigned keep = grid_keep_mask(g);
    if (counts_split) p.split_counts[static_cast<std::int64_t>(q) * p.h_kv + h] = g.routed ? 1 : __popc(keep);
#pragma unroll 1
    for (unsigned m = in & keep; m != 0u; m &= m - 1u)
      atomicAdd(&s.edges[grid_task_row(s, g.b, l0, grid_id(g, __ffs(m) - 1))], 1);
  }
  __syncthreads();
  const int qpi = p.q_per_item;
  const int my_edges = tid < n_rows ? s.edges[tid] : 0;
  const K2qRowTotal mine =
      row_total(static_cast<unsigned>(my_edges), static_cast<unsigned>((my_edges + qpi - 1) / qpi));
  K2qRowTotal ex = 0, agg = 0;
  PairScan(scan_tmp.pair).ExclusiveSum(mine, ex, agg);
  if (tid == 0) p.task_totals[task] = agg;
  cg::this_grid().sync();

  // C. The tasks before this one: edges of this head's, items of all (flat (head, row) order).
  if (warp == 0) {
    const TaskBase base = task_base(p.task_totals, n_tasks, task, per_head, lane);
    if (lane == 0) s_base = base;
  }
  __syncthreads();
  const int stride = p.max_rows + 1;
  const int head_edges = static_cast<int>(s_base.head_edges);
  std::int32_t* g_row_ptr = p.row_ptr + static_cast<std::int64_t>(h) * stride;
  if (tid < n_rows) {
    const int begin = static_cast<int>(s_base.edge_base) + static_cast<int>(total_edges(ex));
    g_row_ptr[row0 + tid] = begin;
    s.cursor[tid] = begin;
    s.first_item[tid] = static_cast<int>(total_items(ex));
    // The row's (request, level): its level is the last one starting at or before it, its
    // request the n-th of that level's.
    const int row = row0 + tid;
    const int i = last_at_most(s.level_row, n_levels, row);
    unsigned long long has = s.level_requests[i];
    for (int nth = row - s.level_row[i]; nth > 0; --nth) has &= has - 1ull;
    const int b = __ffsll(static_cast<long long>(has)) - 1;
    s.coord[tid] = (b << 20) | (l0 + i);
    if (h == 0) {
      p.row_coords[2 * static_cast<std::int64_t>(row)] = b;
      p.row_coords[2 * static_cast<std::int64_t>(row) + 1] = l0 + i;
    }
  }
  if (r == per_head - 1)  // past the head's last row, row_ptr holds its edge total
    for (int row = s_total_rows + tid; row <= p.max_rows; row += kGridThreads) g_row_ptr[row] = head_edges;
  if (task == 0 && tid == 0) *p.total_rows = s_total_rows;
  if (task == n_tasks - 1 && tid == 0)
    *p.work_count = static_cast<int>(min(s_base.items, static_cast<unsigned long long>(p.work_capacity)));
  __syncthreads();

  // The task's work items, a thread per item (a warp stores consecutive items).
  const int task_items = static_cast<int>(total_items(agg));
  for (int k = tid; k < task_items; k += kGridThreads) {
    const int i = last_at_most(s.first_item, n_rows, k);
    const int first = (k - s.first_item[i]) * qpi;
    const std::int64_t w = static_cast<std::int64_t>(s_base.item_base) + k;
    const int coord = s.coord[i];
    if (w < p.work_capacity)
      p.work[w] =
          WorkItem{h, row0 + i, s.cursor[i] + first, min(qpi, s.edges[i] - first), coord >> 20, coord & 0xfffff};
  }
  __syncthreads();  // cursors are read above and advanced below

  // Placement, kGridThreads queries per round.
  const std::int64_t edges_cap = p.edges_per_head;
  std::int32_t* g_qsplit = p.qsplit + static_cast<std::int64_t>(h) * edges_cap;
  const unsigned below_lane = (1u << lane) - 1u;
  for (int base = 0; base < p.total_q && n_rows > 0; base += kGridThreads) {
    const int q = base + tid;
    GridQuery<kK> g;
    unsigned hits = 0, keep = 0;
    if (q < p.total_q) {
      g = one_round ? own : grid_load_query<kK>(p, s_begin, s_end, s_rows, h, q, routes);
      hits = grid_in_task(g, l0, l1);
      if (hits != 0u) {
        keep = grid_keep_mask(g);
        hits &= keep;
      }
    }
#pragma unroll 1
    for (unsigned m = hits; m != 0u; m &= m - 1u)
      atomicOr(&s.mask[grid_task_row(s, g.b, l0, grid_id(g, __ffs(m) - 1)) * kGridMaskWords + warp], 1u << lane);
    __syncthreads();
#pragma unroll 1
    for (unsigned m = hits; m != 0u; m &= m - 1u) {
      const int id = grid_id(g, __ffs(m) - 1);
      const int row = grid_task_row(s, g.b, l0, id);
      const unsigned* words = s.mask + row * kGridMaskWords;
      int below = __popc(words[warp] & below_lane);
      for (int w = 0; w < warp; ++w) below += __popc(words[w]);
      const int pos = s.cursor[row] + below;
      const int q_local = q - s_begin[g.b];
      if (pos >= 0 && pos < edges_cap) g_qsplit[pos] = qsplit::encode(q_local, grid_slot(g, keep, id));
    }
    __syncthreads();
    if (tid < n_rows) {
      int round = 0;
#pragma unroll
      for (int w = 0; w < kGridMaskWords; ++w) {
        round += __popc(s.mask[tid * kGridMaskWords + w]);
        s.mask[tid * kGridMaskWords + w] = 0;
      }
      s.cursor[tid] += round;
    }
    __syncthreads();
  }

  // The tail past the head's last edge, shared by the head's tasks.
  for (std::int64_t i = head_edges + static_cast<std::int64_t>(r) * kGridThreads + tid; i < edges_cap;
       i += static_cast<std::int64_t>(per_head) * kGridThreads)
    g_qsplit[i] = qsplit::kUnused;
}

}  // namespace msa::cuda::k2q
