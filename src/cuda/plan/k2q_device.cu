// Device k2q planner: five stages, all on one stream, no host synchronisation.
//
//   1. row map     one CTA per level l: rows of level l start at sum_b min(rows_b, l) and are
//                  numbered request-minor by a block scan of (rows_b > l); one extra CTA scans
//                  the per-request unit counts (unit_start) and sums total_rows.
//   2. count       one warp per (unit, kv head): a unit is <= q_per_unit consecutive queries of
//                  one request; it counts its edges per block in a shared-memory histogram and
//                  writes split_counts.
//   3. unit prefix one CTA per (kv head, request, 32 levels): exclusive prefix of the
//                  per-unit counts along the request's units (in place; each warp a chunk of
//                  units, lanes = levels, so every access is a coalesced row of counts), and
//                  the row's (edges, work items).
//      flat scan   cub::DeviceScan over [h_kv, max_rows + 1] (edges, items) pairs.
//      finalize    row_ptr (the flat scan minus the head's base) and work_count; then one
//                  thread per work slot writes its item (binary search over the scan).
//   4. scatter     the count warps again: per-block cursors = row_ptr + unit prefix, qsplit
//                  placed in query order (lane order within a pass) with no global atomics, so
//                  every row is q-ascending exactly as the host's sequential writer leaves it.
//   5. finish      q_indices = qsplit & 0xffffff (coalesced), -1 after each head's last edge.
//
// Per query the selection is the set of ids in [0, rows_b) and a kept id's slot is the number
// of kept ids below it: a warp holds 32 / K' queries (K' = next power of two >= topk), one id
// per lane, and both facts come from K' segment shuffles.
#include "cuda/plan/k2q_device.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <mutex>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/warp/warp_scan.cuh>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/tile_route.h"
#include "cuda/common/check.h"
#include "cuda/common/cub_temp.h"

namespace msa::cuda {

namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kMapThreads = 256;       // row map CTA
constexpr int kPrefixWarps = 16;       // unit prefix CTA: warps split the units
constexpr int kPrefixBatch = 8;        // counts loaded before they are summed
constexpr int kPassBatch = 4;          // top-k passes loaded ahead of their analysis
constexpr int kFinalizeThreads = 256;
constexpr int kTailThreads = 256;
constexpr int kTailMaxCtasPerHead = 1024;
constexpr int kMaxUnitWarps = 8;
constexpr int kMinQPerUnit = 64;
constexpr std::size_t kUnitSmemTarget = 48 * 1024;   // no opt-in attribute needed below this
constexpr std::size_t kUnitSmemMax = 227 * 1024;     // sm_90 opt-in limit per CTA
constexpr std::int64_t kInt32Max = INT_MAX;

// (edges, work items) of one row packed as edges << 32 | items, so that one primitive 64-bit
// sum scans both. items never carry: their total is <= work_capacity < 2^31. The edges half
// may wrap mod 2^32 across heads, which is harmless: a head's row_ptr is the difference from
// the head's base mod 2^32, exact because a head has < 2^31 edges.
using RowTotal = unsigned long long;

__device__ __forceinline__ RowTotal row_total(unsigned edges, unsigned items) {
  return (static_cast<RowTotal>(edges) << 32) | items;
}
__device__ __forceinline__ unsigned total_edges(RowTotal t) { return static_cast<unsigned>(t >> 32); }
__device__ __forceinline__ unsigned total_items(RowTotal t) { return static_cast<unsigned>(t); }

// Everything the planner kernels read and write. Shapes in brackets; all counts fit in int32
// (k2q_device_sizes checks), offsets are formed in 64 bits.
struct K2qBuildParams {
  // inputs
  const std::int32_t* cu_seqlens_q;  // [batch + 1]
  const std::int32_t* k_len;         // [batch]
  const std::int32_t* topk_ids;      // [h_kv, total_q, topk], last dim contiguous
  std::int64_t stride_topk_head;
  std::int64_t stride_topk_token;
  const std::uint8_t* union_tile;    // [h_kv, route_per_head] or null: rows of flagged tiles
  int route_q_per_tile;              //   are left out (split count 1, no edge); see TileRoute
  int route_per_head;
  // outputs
  std::int32_t* row_coords;          // [max_rows, 2]
  std::int32_t* row_ptr;             // [h_kv, max_rows + 1]
  std::int32_t* q_indices;           // [h_kv, edges_per_head]
  std::int32_t* qsplit;              // [h_kv, edges_per_head]
  std::int32_t* split_counts;        // [total_q, h_kv]
  std::int32_t* work;                // [work_capacity, 6]
  std::int32_t* work_count;          // [1]
  std::int32_t* total_rows;          // [1]
  // scratch
  std::int32_t* row_of;              // [batch, max_blocks]
  std::int32_t* unit_start;          // [batch + 1]
  std::int32_t* unit_counts;         // [h_kv, max_units, max_blocks]
  RowTotal* row_totals;              // [h_kv, max_rows + 1] edges << 32 | items per row
  RowTotal* row_scan;                // [h_kv, max_rows + 1] flat exclusive scan of row_totals
  // geometry
  int batch;
  int total_q;
  int h_kv;
  int topk;
  int topk_pow2;                     // K' = next power of two >= topk (lanes per query)
  int log_topk_pow2;
  int q_per_item;
  int q_per_unit;
  int max_blocks;
  int max_rows;
  int max_units;
  int level_tiles;                   // ceil(max_blocks / 32)
  int unit_warps;
  int edges_per_head;
  int work_capacity;
};

// ---- per-request geometry (inputs clamped so that nothing reads or writes out of bounds) ----

__device__ __forceinline__ int request_blocks(const K2qBuildParams& p, int b) {
  const int kl = max(p.k_len[b], 0);
  return min(kl / 128 + (kl % 128 != 0 ? 1 : 0), p.max_blocks);
}

struct QueryRange {
  int begin;
  int end;
};

__device__ __forceinline__ QueryRange request_queries(const K2qBuildParams& p, int b) {
  const int begin = min(max(p.cu_seqlens_q[b], 0), p.total_q);
  const int end = min(max(p.cu_seqlens_q[b + 1], begin), p.total_q);
  return QueryRange{begin, end};
}

// ---- stage 1: row map and units -------------------------------------------------------------

template <class Scan, class Reduce>
union MapTemp {
  typename Scan::TempStorage scan;
  typename Reduce::TempStorage reduce;
};

__global__ void __launch_bounds__(kMapThreads) k2q_row_map_kernel(const K2qBuildParams p) {
  using Scan = cub::BlockScan<int, kMapThreads>;
  using Reduce = cub::BlockReduce<int, kMapThreads>;
  __shared__ MapTemp<Scan, Reduce> tmp;
  __shared__ int s_level_start;
  const int tid = threadIdx.x;
  const int level = blockIdx.x;

  if (level == p.max_blocks) {
    // The extra CTA: unit_start = exclusive scan of ceil(q_len / q_per_unit); total_rows.
    int carry = 0;
    int rows_part = 0;
    for (int base = 0; base < p.batch; base += kMapThreads) {
      const int b = base + tid;
      int units = 0;
      if (b < p.batch) {
        const QueryRange r = request_queries(p, b);
        units = (r.end - r.begin + p.q_per_unit - 1) / p.q_per_unit;
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
  if (tid == 0) s_level_start = start;
  __syncthreads();
  int carry = s_level_start;
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

// ---- shared by the count and scatter warps --------------------------------------------------

struct Unit {
  int b;
  int q_request;  // the request's first packed query (q_local = q - q_request)
  int q_begin;    // this unit's packed queries [q_begin, q_end)
  int q_end;
  int blocks;     // rows_b
};

// The request owning unit u (< unit_start[batch]): the last b with unit_start[b] <= u.
__device__ __forceinline__ Unit locate_unit(const K2qBuildParams& p, int u) {
  int lo = 0, hi = p.batch - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (p.unit_start[mid] <= u) lo = mid;
    else hi = mid - 1;
  }
  const QueryRange r = request_queries(p, lo);
  Unit unit;
  unit.b = lo;
  unit.q_request = r.begin;
  unit.q_begin = r.begin + (u - p.unit_start[lo]) * p.q_per_unit;
  unit.q_end = min(unit.q_begin + p.q_per_unit, r.end);
  unit.blocks = request_blocks(p, lo);
  return unit;
}

// One lane's view of a pass: lane = (query segment, slot).
struct PassLane {
  int q;         // packed query of this lane's segment
  int id;        // the raw id (meaningful when keep)
  int slot;      // rank of id among the query's kept ids (meaningful when keep)
  int count;     // kept ids of the query (same in every lane of the segment)
  bool keep;     // in-range id, first occurrence in its row
  bool seg_head; // slot lane 0 of a real query: writes split_counts
};

// Whether (query q, KV head h) is routed to the tile-union kernel (PrefillPath::kAuto).
__device__ __forceinline__ bool routed_row(const K2qBuildParams& p, int h, int q) {
  return p.union_tile != nullptr &&
         p.union_tile[static_cast<std::int64_t>(h) * p.route_per_head + q / p.route_q_per_tile] != 0;
}

// This lane's raw id of the pass starting at query q0 (-1 outside the unit or the row, and
// for a routed row, which has no edge here).
__device__ __forceinline__ int load_pass_id(const K2qBuildParams& p, const std::int32_t* g_topk_head, int h,
                                            int q0, int q_end, int lane) {
  const int q = q0 + (lane >> p.log_topk_pow2);
  const int s = lane & (p.topk_pow2 - 1);
  return q < q_end && s < p.topk && !routed_row(p, h, q)
             ? __ldg(g_topk_head + static_cast<std::int64_t>(q) * p.stride_topk_token + s)
             : -1;
}

__device__ __forceinline__ PassLane analyse_pass(const K2qBuildParams& p, int id, int q0, int q_end,
                                                 int blocks, int lane) {
  const int kp = p.topk_pow2;
  const int seg = lane >> p.log_topk_pow2;
  const int s = lane & (kp - 1);
  PassLane e;
  e.q = q0 + seg;
  e.id = id;
  const bool valid = e.q < q_end && s < p.topk && id >= 0 && id < blocks;
  // First occurrence: no lower slot of the segment holds the same valid id.
  const int key = valid ? id : INT_MAX;
  bool dup = false;
  for (int j = 0; j < kp; ++j) {
    const int other = __shfl_sync(kFullMask, key, j, kp);
    dup |= (j < s) && (other == key);
  }
  e.keep = valid && !dup;
  // Slot: kept ids of the segment below this one (kept ids are distinct).
  const int kept_key = e.keep ? id : INT_MAX;
  int slot = 0;
  for (int j = 0; j < kp; ++j) slot += __shfl_sync(kFullMask, kept_key, j, kp) < kept_key ? 1 : 0;
  e.slot = slot;
  const unsigned seg_mask = kp == 32 ? kFullMask : ((1u << kp) - 1u) << (seg << p.log_topk_pow2);
  e.count = __popc(__ballot_sync(kFullMask, e.keep) & seg_mask);
  e.seg_head = s == 0 && e.q < q_end;
  return e;
}

// ---- stage 2: per-unit histograms -----------------------------------------------------------

__global__ void __launch_bounds__(kMaxUnitWarps * 32) k2q_count_kernel(const K2qBuildParams p) {
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

  const std::int32_t* g_topk_head = p.topk_ids + h * p.stride_topk_head;
  const int q_per_pass = 32 >> p.log_topk_pow2;
  for (int q_batch = unit.q_begin; q_batch < unit.q_end; q_batch += kPassBatch * q_per_pass) {
    int ids[kPassBatch];  // loads of kPassBatch passes in flight together
#pragma unroll
    for (int k = 0; k < kPassBatch; ++k)
      ids[k] = load_pass_id(p, g_topk_head, h, q_batch + k * q_per_pass, unit.q_end, lane);
#pragma unroll
    for (int k = 0; k < kPassBatch; ++k) {
      const int q0 = q_batch + k * q_per_pass;
      if (q0 >= unit.q_end) break;  // warp-uniform
      const PassLane e = analyse_pass(p, ids[k], q0, unit.q_end, unit.blocks, lane);
      if (e.keep) atomicAdd(&s_hist[e.id], 1);
      if (e.seg_head) p.split_counts[static_cast<std::int64_t>(e.q) * p.h_kv + h] = routed_row(p, h, e.q) ? 1 : e.count;
    }
  }
  __syncwarp();  // shared-memory atomics visible to every lane

  std::int32_t* g_counts = p.unit_counts + (static_cast<std::int64_t>(h) * p.max_units + u) * p.max_blocks;
  for (int l = lane; l < unit.blocks; l += 32) g_counts[l] = s_hist[l];
}

// ---- stage 3: per-row unit prefix and totals --------------------------------------------------

__global__ void __launch_bounds__(kPrefixWarps * 32) k2q_unit_prefix_kernel(const K2qBuildParams p) {
  __shared__ int s_chunk_sum[kPrefixWarps][32];
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int b = blockIdx.x / p.level_tiles;
  const int tile = blockIdx.x - b * p.level_tiles;
  const int h = blockIdx.y;
  const int blocks = request_blocks(p, b);
  if (tile * 32 >= blocks) return;  // CTA-uniform
  const int level = tile * 32 + lane;
  const bool live = level < blocks;
  // Warp w owns a contiguous chunk of the request's units.
  const int u_begin = p.unit_start[b];
  const int units = p.unit_start[b + 1] - u_begin;
  const int chunk = (units + kPrefixWarps - 1) / kPrefixWarps;
  const int my_begin = u_begin + min(warp * chunk, units);
  const int my_end = u_begin + min((warp + 1) * chunk, units);
  std::int32_t* g_col = p.unit_counts + static_cast<std::int64_t>(h) * p.max_units * p.max_blocks + level;
  const std::int64_t stride = p.max_blocks;

  // Pass 1: the chunk's sum per level.
  int sum = 0;
  if (live) {
    for (int u0 = my_begin; u0 < my_end; u0 += kPrefixBatch) {
      int v[kPrefixBatch];
#pragma unroll
      for (int k = 0; k < kPrefixBatch; ++k) v[k] = u0 + k < my_end ? g_col[(u0 + k) * stride] : 0;
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
      for (int k = 0; k < kPrefixBatch; ++k) v[k] = u0 + k < my_end ? g_col[(u0 + k) * stride] : 0;
#pragma unroll
      for (int k = 0; k < kPrefixBatch; ++k) {
        if (u0 + k < my_end) g_col[(u0 + k) * stride] = run;
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

// ---- stage 3b: row_ptr, work_count; work items --------------------------------------------

__global__ void __launch_bounds__(kFinalizeThreads) k2q_finalize_kernel(const K2qBuildParams p) {
  const std::int64_t stride = static_cast<std::int64_t>(p.max_rows) + 1;
  const std::int64_t n = stride * p.h_kv;
  const std::int64_t idx = static_cast<std::int64_t>(blockIdx.x) * kFinalizeThreads + threadIdx.x;
  if (idx >= n) return;
  const int h = static_cast<int>(idx / stride);
  p.row_ptr[idx] = static_cast<int>(total_edges(p.row_scan[idx]) - total_edges(p.row_scan[h * stride]));
  if (idx == n - 1)  // the last entry is a zero padding row: its exclusive value is the total
    *p.work_count = static_cast<int>(min(total_items(p.row_scan[idx]), static_cast<unsigned>(p.work_capacity)));
}

// One thread per work slot: the row whose items cover slot w is the last entry whose
// exclusive item count is <= w (rows without items share the next row's value).
__global__ void __launch_bounds__(kFinalizeThreads) k2q_items_kernel(const K2qBuildParams p) {
  const std::int64_t stride = static_cast<std::int64_t>(p.max_rows) + 1;
  const std::int64_t n = stride * p.h_kv;
  const unsigned w = blockIdx.x * kFinalizeThreads + threadIdx.x;
  const unsigned count = min(total_items(p.row_scan[n - 1]), static_cast<unsigned>(p.work_capacity));
  if (w >= count) return;
  std::int64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    const std::int64_t mid = (lo + hi + 1) >> 1;
    if (total_items(p.row_scan[mid]) <= w) lo = mid;
    else hi = mid - 1;
  }
  const int h = static_cast<int>(lo / stride);
  const int row = static_cast<int>(lo - h * stride);
  const RowTotal ex = p.row_scan[lo];
  const int row_begin = static_cast<int>(total_edges(ex) - total_edges(p.row_scan[h * stride]));
  const int edges = static_cast<int>(total_edges(p.row_totals[lo]));
  const int first = static_cast<int>(w - total_items(ex)) * p.q_per_item;
  int2* g_item = reinterpret_cast<int2*>(p.work + 6 * static_cast<std::int64_t>(w));
  g_item[0] = make_int2(h, row);
  g_item[1] = make_int2(row_begin + first, min(p.q_per_item, edges - first));
  g_item[2] = make_int2(p.row_coords[2 * static_cast<std::int64_t>(row)], p.row_coords[2 * static_cast<std::int64_t>(row) + 1]);
}

// ---- stage 4: scatter -----------------------------------------------------------------------

__global__ void __launch_bounds__(kMaxUnitWarps * 32) k2q_scatter_kernel(const K2qBuildParams p) {
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

  const std::int32_t* g_topk_head = p.topk_ids + h * p.stride_topk_head;
  std::int32_t* g_qsplit = p.qsplit + static_cast<std::int64_t>(h) * p.edges_per_head;
  const unsigned lanes_below = (1u << lane) - 1u;
  const int q_per_pass = 32 >> p.log_topk_pow2;
  for (int q_batch = unit.q_begin; q_batch < unit.q_end; q_batch += kPassBatch * q_per_pass) {
    int ids[kPassBatch];
#pragma unroll
    for (int k = 0; k < kPassBatch; ++k)
      ids[k] = load_pass_id(p, g_topk_head, h, q_batch + k * q_per_pass, unit.q_end, lane);
#pragma unroll
    for (int k = 0; k < kPassBatch; ++k) {
      const int q0 = q_batch + k * q_per_pass;
      if (q0 >= unit.q_end) break;  // warp-uniform
      const PassLane e = analyse_pass(p, ids[k], q0, unit.q_end, unit.blocks, lane);
      // Lanes of this pass that hit the same block take consecutive places in lane order, which
      // is query order; a lane that keeps nothing matches only itself.
      const unsigned peers = __match_any_sync(kFullMask, e.keep ? e.id : -1 - lane);
      const int rank = __popc(peers & lanes_below);
      const int base = e.keep ? s_cursor[e.id] : 0;
      __syncwarp();  // every peer has read the cursor before the leader moves it
      if (e.keep && rank == 0) s_cursor[e.id] = base + __popc(peers);
      __syncwarp();
      const int pos = base + rank;
      // Only qsplit is scattered; the finish pass derives q_indices from it, coalesced.
      if (e.keep && pos >= 0 && pos < p.edges_per_head) {
        const unsigned q_local = static_cast<unsigned>(e.q - unit.q_request);
        g_qsplit[pos] = static_cast<int>(q_local | (static_cast<unsigned>(e.slot) << 24));
      }
    }
  }
}

// ---- stage 5: q_indices and the -1 tail --------------------------------------------------------

__global__ void __launch_bounds__(kTailThreads) k2q_finish_kernel(const K2qBuildParams p) {
  const int h = blockIdx.y;
  const std::int64_t stride = static_cast<std::int64_t>(p.max_rows) + 1;
  const int used = min(max(p.row_ptr[h * stride + p.max_rows], 0), p.edges_per_head);
  std::int32_t* g_q_indices = p.q_indices + static_cast<std::int64_t>(h) * p.edges_per_head;
  std::int32_t* g_qsplit = p.qsplit + static_cast<std::int64_t>(h) * p.edges_per_head;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kTailThreads + threadIdx.x;
       i < p.edges_per_head; i += static_cast<std::int64_t>(gridDim.x) * kTailThreads) {
    if (i < used) {
      g_q_indices[i] = g_qsplit[i] & 0xffffff;
    } else {
      g_q_indices[i] = -1;
      g_qsplit[i] = -1;
    }
  }
}

// ---- host helpers -----------------------------------------------------------------------------

std::size_t round256(std::size_t bytes) { return (std::max<std::size_t>(bytes, 1) + 255) / 256 * 256; }

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

std::int64_t next_pow2(std::int64_t v) {
  std::int64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}


K2qBuildParams make_params(const K2qDeviceSizes& sizes, const K2qDeviceInputs& in,
                           const K2qDeviceBuffers& out) {
  const K2qDeviceGeometry& g = sizes.geo;
  K2qBuildParams p{};
  p.cu_seqlens_q = in.cu_seqlens_q;
  p.k_len = in.k_len;
  p.topk_ids = in.topk;
  p.stride_topk_head = in.stride_topk_head;
  p.stride_topk_token = in.stride_topk_token;
  p.union_tile = in.union_tile;
  p.route_q_per_tile = in.union_tile != nullptr ? in.route_q_per_tile : 1;
  p.route_per_head = in.union_tile != nullptr ? static_cast<int>(tiles_per_head(g.total_q, in.route_q_per_tile)) : 0;
  p.row_coords = out.row_coords;
  p.row_ptr = out.row_ptr;
  p.q_indices = out.q_indices;
  p.qsplit = out.qsplit;
  p.split_counts = out.split_counts;
  p.work = out.work;
  p.work_count = out.work_count;
  p.total_rows = out.total_rows;
  p.row_of = out.row_of;
  p.unit_start = out.unit_start;
  p.unit_counts = out.unit_counts;
  p.row_totals = static_cast<RowTotal*>(out.row_totals);
  p.row_scan = static_cast<RowTotal*>(out.row_scan);
  p.batch = static_cast<int>(g.batch);
  p.total_q = static_cast<int>(g.total_q);
  p.h_kv = g.h_kv;
  p.topk = g.topk;
  p.topk_pow2 = static_cast<int>(next_pow2(g.topk));
  p.log_topk_pow2 = 0;
  while ((1 << p.log_topk_pow2) < p.topk_pow2) ++p.log_topk_pow2;
  p.q_per_item = g.q_per_item;
  p.q_per_unit = g.q_per_unit;
  p.max_blocks = static_cast<int>(g.max_blocks);
  p.max_rows = static_cast<int>(g.max_rows);
  p.max_units = static_cast<int>(g.max_units);
  p.level_tiles = static_cast<int>(std::max<std::int64_t>(1, ceil_div(g.max_blocks, 32)));
  p.unit_warps = g.unit_warps;
  p.edges_per_head = static_cast<int>(g.edges_per_head);
  p.work_capacity = static_cast<int>(g.work_capacity);
  return p;
}

}  // namespace

K2qDeviceSizes k2q_device_sizes(int h_kv, int topk, int q_per_item, const ProblemSize& problem) {
  MSA_REQUIRE(h_kv >= 1 && h_kv <= 65535, "shape.h_kv", std::to_string(h_kv), "must be in 1..65535");
  MSA_REQUIRE(topk >= 1 && topk <= 32, "shape.topk", std::to_string(topk),
              "the device planner supports topk in 1..32");
  AttentionShape shape;
  shape.h_kv = h_kv;
  shape.h_q = h_kv;
  shape.topk = topk;
  const K2qSizes ks = k2q_sizes(shape, problem, q_per_item);  // checks q_per_item and problem >= 0

  K2qDeviceSizes s;
  K2qDeviceGeometry& g = s.geo;
  g.batch = problem.batch;
  g.total_q = problem.total_q;
  g.max_k_len = problem.max_k_len;
  g.h_kv = h_kv;
  g.topk = topk;
  g.q_per_item = q_per_item;
  g.max_blocks = ceil_div(problem.max_k_len, kBlockSize);
  g.max_rows = ks.max_rows;
  g.edges_per_head = ks.edges_per_head;
  g.work_capacity = ks.work_capacity;
  MSA_REQUIRE(g.edges_per_head <= kInt32Max, "total_q", std::to_string(problem.total_q),
              "total_q * topk must fit in int32");
  MSA_REQUIRE((g.max_rows + 1) * h_kv <= kInt32Max, "max_k_len", std::to_string(problem.max_k_len),
              "batch * ceil(max_k_len / 128) * h_kv rows must fit in int32");
  MSA_REQUIRE(g.work_capacity <= kInt32Max, "total_q", std::to_string(problem.total_q),
              "the work capacity must fit in int32");

  // Units: enough queries that the per-unit histograms (max_blocks per unit) stay about the
  // size of the unit's edges, never fewer than kMinQPerUnit.
  g.q_per_unit = static_cast<int>(std::max<std::int64_t>(kMinQPerUnit, next_pow2(ceil_div(g.max_blocks, topk))));
  g.max_units = ceil_div(problem.total_q, g.q_per_unit) + problem.batch;
  MSA_REQUIRE(g.max_units <= kInt32Max, "batch", std::to_string(problem.batch), "too many requests");
  const std::size_t warp_smem = static_cast<std::size_t>(g.max_blocks) * sizeof(std::int32_t);
  MSA_REQUIRE(warp_smem <= kUnitSmemMax, "max_k_len", std::to_string(problem.max_k_len),
              "the device planner keeps one counter per block of a request in shared memory: at "
              "most " + std::to_string(kUnitSmemMax / 4 * kBlockSize) + " tokens");
  g.unit_warps = warp_smem == 0 ? kMaxUnitWarps
                                : static_cast<int>(std::clamp<std::size_t>(kUnitSmemTarget / warp_smem, 1, kMaxUnitWarps));
  g.unit_smem_bytes = warp_smem * static_cast<std::size_t>(g.unit_warps);

  const auto i32 = [](std::int64_t n) { return round256(static_cast<std::size_t>(n) * 4); };
  const std::int64_t rows1 = g.max_rows + 1;
  s.row_coords = i32(g.max_rows * 2);
  s.row_ptr = i32(h_kv * rows1);
  s.q_indices = i32(h_kv * g.edges_per_head);
  s.qsplit = s.q_indices;
  s.split_counts = i32(problem.total_q * h_kv);
  s.work = i32(g.work_capacity * 6);
  s.work_count = i32(1);
  s.total_rows = i32(1);
  s.row_of = i32(g.max_rows);
  s.unit_start = i32(problem.batch + 1);
  s.unit_counts = i32(static_cast<std::int64_t>(h_kv) * g.max_units * g.max_blocks);
  s.row_totals = round256(static_cast<std::size_t>(h_kv * rows1) * sizeof(RowTotal));
  s.row_scan = s.row_totals;
  s.cub_temp = round256(cub_temp_bound(h_kv * rows1));
  s.total = s.row_coords + s.row_ptr + s.q_indices + s.qsplit + s.split_counts + s.work +
            s.work_count + s.total_rows + s.row_of + s.unit_start + s.unit_counts +
            s.row_totals + s.row_scan + s.cub_temp;
  return s;
}

K2qDeviceBuffers k2q_device_carve(const K2qDeviceSizes& s, void* workspace) {
  MSA_REQUIRE(reinterpret_cast<std::uintptr_t>(workspace) % 256 == 0, "workspace.data",
              std::to_string(reinterpret_cast<std::uintptr_t>(workspace)), "must be 256-byte aligned");
  auto* cursor = static_cast<char*>(workspace);
  const auto take = [&cursor](std::size_t bytes) {
    char* at = cursor;
    cursor += bytes;
    return at;
  };
  K2qDeviceBuffers b{};
  b.row_coords = reinterpret_cast<std::int32_t*>(take(s.row_coords));
  b.row_ptr = reinterpret_cast<std::int32_t*>(take(s.row_ptr));
  b.q_indices = reinterpret_cast<std::int32_t*>(take(s.q_indices));
  b.qsplit = reinterpret_cast<std::int32_t*>(take(s.qsplit));
  b.split_counts = reinterpret_cast<std::int32_t*>(take(s.split_counts));
  b.work = reinterpret_cast<std::int32_t*>(take(s.work));
  b.work_count = reinterpret_cast<std::int32_t*>(take(s.work_count));
  b.total_rows = reinterpret_cast<std::int32_t*>(take(s.total_rows));
  b.row_of = reinterpret_cast<std::int32_t*>(take(s.row_of));
  b.unit_start = reinterpret_cast<std::int32_t*>(take(s.unit_start));
  b.unit_counts = reinterpret_cast<std::int32_t*>(take(s.unit_counts));
  b.row_totals = take(s.row_totals);
  b.row_scan = take(s.row_scan);
  b.cub_temp = take(s.cub_temp);
  return b;
}

void build_k2q_device(const K2qDeviceSizes& sizes, const K2qDeviceInputs& in,
                      const K2qDeviceBuffers& out, cudaStream_t stream) {
  const K2qDeviceGeometry& g = sizes.geo;
  const K2qBuildParams p = make_params(sizes, in, out);
  const std::int64_t rows1 = g.max_rows + 1;
  const std::int64_t scan_items = rows1 * g.h_kv;

  k2q_row_map_kernel<<<static_cast<unsigned>(g.max_blocks + 1), kMapThreads, 0, stream>>>(p);

  if (g.unit_smem_bytes > kUnitSmemTarget) {
    // Raised only when a larger plan needs it, so that a captured call never sets it.
    static std::mutex mutex;
    static std::size_t granted = kUnitSmemTarget;
    const std::lock_guard<std::mutex> lock(mutex);
    if (g.unit_smem_bytes > granted) {
      MSA_CUDA_CHECK(cudaFuncSetAttribute(k2q_count_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(g.unit_smem_bytes)));
      MSA_CUDA_CHECK(cudaFuncSetAttribute(k2q_scatter_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(g.unit_smem_bytes)));
      granted = g.unit_smem_bytes;
    }
  }
  const dim3 unit_grid(static_cast<unsigned>(std::max<std::int64_t>(1, ceil_div(g.max_units, g.unit_warps))),
                       static_cast<unsigned>(g.h_kv));
  const unsigned unit_threads = static_cast<unsigned>(g.unit_warps * 32);
  k2q_count_kernel<<<unit_grid, unit_threads, g.unit_smem_bytes, stream>>>(p);

  // Rows that do not exist (past total_rows) must scan as zeros.
  MSA_CUDA_CHECK(cudaMemsetAsync(out.row_totals, 0, static_cast<std::size_t>(scan_items) * sizeof(RowTotal), stream));
  const dim3 prefix_grid(static_cast<unsigned>(std::max<std::int64_t>(1, g.batch * p.level_tiles)),
                         static_cast<unsigned>(g.h_kv));
  k2q_unit_prefix_kernel<<<prefix_grid, kPrefixWarps * 32, 0, stream>>>(p);

  std::size_t temp_bytes = 0;
  MSA_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, p.row_totals, p.row_scan,
                                               static_cast<int>(scan_items), stream));
  cub_temp_check(temp_bytes, sizes.cub_temp, "k2q scan scratch");
  MSA_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(out.cub_temp, temp_bytes, p.row_totals, p.row_scan,
                                               static_cast<int>(scan_items), stream));

  k2q_finalize_kernel<<<static_cast<unsigned>(ceil_div(scan_items, kFinalizeThreads)), kFinalizeThreads, 0,
                        stream>>>(p);
  k2q_items_kernel<<<static_cast<unsigned>(std::max<std::int64_t>(1, ceil_div(g.work_capacity, kFinalizeThreads))),
                     kFinalizeThreads, 0, stream>>>(p);
  k2q_scatter_kernel<<<unit_grid, unit_threads, g.unit_smem_bytes, stream>>>(p);

  const dim3 tail_grid(static_cast<unsigned>(std::clamp<std::int64_t>(ceil_div(g.edges_per_head, kTailThreads), 1,
                                                                     kTailMaxCtasPerHead)),
                       static_cast<unsigned>(g.h_kv));
  k2q_finish_kernel<<<tail_grid, kTailThreads, 0, stream>>>(p);
  MSA_CUDA_CHECK(cudaGetLastError());
}

K2qCsr k2q_device_snapshot(const K2qDeviceSizes& sizes, const K2qDeviceBuffers& buf,
                           cudaStream_t stream) {
  const K2qDeviceGeometry& g = sizes.geo;
  MSA_CUDA_CHECK(cudaStreamSynchronize(stream));
  const auto copy = [](void* dst, const void* src, std::size_t bytes) {
    if (bytes > 0) MSA_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
  };
  std::int32_t total_rows = 0, work_count = 0;
  copy(&total_rows, buf.total_rows, sizeof total_rows);
  copy(&work_count, buf.work_count, sizeof work_count);
  total_rows = static_cast<std::int32_t>(std::clamp<std::int64_t>(total_rows, 0, g.max_rows));
  work_count = static_cast<std::int32_t>(std::clamp<std::int64_t>(work_count, 0, g.work_capacity));

  K2qCsr csr;
  csr.h_kv = g.h_kv;
  csr.topk = g.topk;
  csr.q_per_item = g.q_per_item;
  csr.batch = g.batch;
  csr.total_q = g.total_q;
  csr.total_rows = total_rows;
  csr.work_capacity = g.work_capacity;
  const auto n = [](std::int64_t v) { return static_cast<std::size_t>(v); };
  csr.row_coords.resize(n(total_rows) * 2);
  copy(csr.row_coords.data(), buf.row_coords, csr.row_coords.size() * 4);
  // row_ptr: the first total_rows + 1 entries of each head's max_rows + 1.
  csr.row_ptr.resize(n(g.h_kv) * n(total_rows + 1));
  MSA_CUDA_CHECK(cudaMemcpy2D(csr.row_ptr.data(), n(total_rows + 1) * 4, buf.row_ptr,
                              n(g.max_rows + 1) * 4, n(total_rows + 1) * 4, n(g.h_kv),
                              cudaMemcpyDeviceToHost));
  csr.q_indices.resize(n(g.h_kv) * n(g.edges_per_head));
  csr.qsplit.resize(csr.q_indices.size());
  copy(csr.q_indices.data(), buf.q_indices, csr.q_indices.size() * 4);
  copy(csr.qsplit.data(), buf.qsplit, csr.qsplit.size() * 4);
  csr.split_counts.resize(n(g.total_q) * n(g.h_kv));
  copy(csr.split_counts.data(), buf.split_counts, csr.split_counts.size() * 4);
  csr.work.resize(n(work_count));
  copy(csr.work.data(), buf.work, csr.work.size() * sizeof(WorkItem));
  return csr;
}

}  // namespace msa::cuda
