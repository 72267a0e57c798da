// The device k2q planner's small path: the whole plan in two launches, for problems whose top-k
// slots fit one CTA per KV head (k2q_device_sizes decides; build_k2q_device launches). The
// general path (k2q_kernels.cuh) takes eight kernels (ten when this was measured), each a few
// microseconds on an idle GPU, which is most of a small chunk's plan (docs/performance.md,
// step 20).
//
//   1. head CTA    one CTA of kSmallThreads per KV head. The head's top-k slots (slot
//                  s = q * K' + j) are loaded into shared memory and analysed once (valid,
//                  first occurrence, rank among the query's kept ids, CSR row). Then:
//                  - routing (when asked): per round of whole tiles, a bitmap of the rows each
//                    tile touches gives its union (distinct (request, block) = distinct rows)
//                    and the kept counts its edges, as tile_route.cu counts them;
//                  - a histogram of edges per row, its exclusive scan = this head's row_ptr;
//                  - placement, kSmallRoundQueries queries at a time: each row's 64-bit mask of
//                    the round's queries gives an edge its rank in the row, so every row is
//                    q-ascending as the host's sequential writer leaves it;
//                  - the -1 / kUnused tail.
//   2. finish CTAs one per KV head: the row map (CTA 0 stores row_coords and total_rows)
//                  before they wait for the head CTAs (programmatic dependent launch); then
//                  each counts the work items of the heads before its own (where its items
//                  start in the flat (head, row) order) and writes its head's; the last one
//                  writes work_count, CTA 0 the routed tiles' list.
//
// Included by k2q_device.cu only, after k2q_kernels.cuh (rank_in_segment, request_blocks).
#pragma once

#include <cstdint>
#include <cub/block/block_scan.cuh>

#include "core/plan_encoding.h"
#include "core/tile_route.h"
#include "cuda/common/ptx.cuh"
#include "cuda/plan/k2q_params.h"
#include "cuda/plan/tile_keys.cuh"
#include "cuda/plan/tile_route.cuh"

namespace msa::cuda::k2q {

// The request holding packed query q (the last b with begin[b] <= q), or -1 when q is in no
// request's clamped range (only for batches that break the contract).
__device__ __forceinline__ int small_request_of(const int* s_begin, const int* s_end, int batch, int q) {
  const int b = request_of_query(s_begin, batch, q, 0);
  return q >= s_begin[b] && q < s_end[b] ? b : -1;
}

// Row of (request b, block l < rows_b): rows are level-major, request-minor.
__device__ __forceinline__ int small_row_of(const int* s_rows, int batch, int b, int l) {
  int row = 0;
  for (int c = 0; c < batch; ++c) row += min(s_rows[c], l) + (c < b && s_rows[c] > l ? 1 : 0);
  return row;
}

__global__ void __launch_bounds__(kSmallThreads, 1) k2q_small_head_kernel(const BuildParams p) {
  using Scan = cub::BlockScan<int, kSmallThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ int s_begin[kSmallMaxBatch], s_end[kSmallMaxBatch], s_rows[kSmallMaxBatch];
  __shared__ std::uint8_t s_kept[kSmallMaxQueries];   // kept ids of each query (0..32)
  __shared__ std::uint8_t s_flags[kSmallMaxQueries];  // this head's tiles: 1 = union path
  __shared__ int s_tile_edges[kSmallRoundQueries], s_tile_unions[kSmallRoundQueries];
  __shared__ int s_total;
  extern __shared__ __align__(16) unsigned char s_dyn[];
  const int kp = p.topk_pow2, lkp = p.log_topk_pow2;
  const int slots = p.total_q << lkp;  // <= kSmallMaxSlots (k2q_small_fits)
  const SmallSmem layout = small_smem(p.max_rows, slots);
  // The raw id of each slot, then the kept slot packed (row << 16 | q_local << 5 | rank), or
  // -1 when the slot keeps nothing.
  int* s_slot = reinterpret_cast<int*>(s_dyn);
  int* s_row_of = reinterpret_cast<int*>(s_dyn + layout.row_of_off);  // [batch, max_blocks]
  int* s_count = reinterpret_cast<int*>(s_dyn + layout.count_off);    // [max_rows + 1]
  auto* s_mask = reinterpret_cast<unsigned*>(s_dyn + layout.mask_off);  // [2, max_rows, 2]
  unsigned* s_bits = s_mask;  // routing: [tiles, words]

  allow_next_grid();  // the finish CTAs map rows meanwhile, then wait for this grid
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int h = blockIdx.x;
  const std::int64_t edges_cap = p.edges_per_head;

  if (tid < p.batch) {
    const QueryRange r = request_queries(p, tid);
    s_begin[tid] = r.begin;
    s_end[tid] = r.end;
    s_rows[tid] = request_blocks(p, tid);
  }
  if (tid < kSmallRoundQueries) s_tile_edges[tid] = s_tile_unions[tid] = 0;
  for (int i = tid; i <= p.max_rows; i += kSmallThreads) s_count[i] = 0;
  for (int i = tid; i < layout.mask_words; i += kSmallThreads) s_mask[i] = 0;
  __syncthreads();
  for (int i = tid; i < p.batch * p.max_blocks; i += kSmallThreads) {
    const int b = i / p.max_blocks, l = i - b * p.max_blocks;
    if (l < s_rows[b]) s_row_of[i] = small_row_of(s_rows, p.batch, b, l);
  }
  const std::int32_t* g_topk_head = p.topk_ids + h * p.stride_topk_head;
#pragma unroll 8
  for (int s = tid; s < slots; s += kSmallThreads) {
    const int q = s >> lkp, j = s & (kp - 1);
    int id = -1;
    if (j < p.topk && small_request_of(s_begin, s_end, p.batch, q) >= 0)
      id = __ldg(g_topk_head + static_cast<std::int64_t>(q) * p.stride_topk_token + j);
    s_slot[s] = id;
  }
  __syncthreads();

  // Analysis: a segment of K' lanes is one query's row (warp-collective; slots is a multiple of
  // K', and the loop bound is the same for every thread).
  for (int base = 0; base < slots; base += kSmallThreads) {
    const int s = base + tid;
    const int q = s >> lkp, j = s & (kp - 1);
    const int b = s < slots ? small_request_of(s_begin, s_end, p.batch, q) : -1;
    const int id = s < slots ? s_slot[s] : -1;
    const bool valid = b >= 0 && j < p.topk && id >= 0 && id < s_rows[b];
    const SegmentRank r = rank_in_segment(valid, id, kp, lkp, lane);
    if (s < slots) {
      s_slot[s] = r.keep ? (s_row_of[b * p.max_blocks + id] << 16) | ((q - s_begin[b]) << 5) | r.slot : -1;
      if (j == 0) s_kept[q] = static_cast<std::uint8_t>(r.count);
    }
  }
  __syncthreads();

  // Routing: which tiles of this head the tile-union kernel takes.
  const bool routing = p.route_tile_out != nullptr;
  const bool routed_rows = routing || p.union_tile != nullptr;
  const int qpt = p.route_q_per_tile;
  const int tiles = routed_rows ? p.route_per_head : 0;  // <= kSmallMaxQueries
  if (routing) {
    const int per_round = max(1, kSmallRoundQueries / qpt);
    const int words = (p.max_rows + 31) >> 5;
    for (int t0 = 0; t0 < tiles; t0 += per_round) {
      const int s_end_round = min(slots, (t0 + per_round) * qpt << lkp);
      for (int s = (t0 * qpt << lkp) + tid; s < s_end_round; s += kSmallThreads) {
        const int v = s_slot[s];
        const int q = s >> lkp;
        const int t = q / qpt - t0;
        if (v >= 0) atomicOr(&s_bits[t * words + (v >> 21)], 1u << ((v >> 16) & 31));
        if ((s & (kp - 1)) == 0) atomicAdd(&s_tile_edges[t], s_kept[q]);
      }
      __syncthreads();
      for (int w = tid; w < per_round * words; w += kSmallThreads) {
        const unsigned bits = s_bits[w];
        if (bits != 0) {
          atomicAdd(&s_tile_unions[w / words], __popc(bits));
          s_bits[w] = 0;
        }
      }
      __syncthreads();
      if (tid < per_round && t0 + tid < tiles) {
        const std::uint8_t flag = union_path_wins(s_tile_unions[tid], s_tile_edges[tid], p.route_group) ? 1 : 0;
        s_flags[t0 + tid] = flag;
        p.route_tile_out[static_cast<std::int64_t>(h) * tiles + t0 + tid] = flag;
      }
      if (tid < per_round) s_tile_unions[tid] = s_tile_edges[tid] = 0;
      __syncthreads();
    }
  } else if (routed_rows) {
    for (int t = tid; t < tiles; t += kSmallThreads)
      s_flags[t] = p.union_tile[static_cast<std::int64_t>(h) * tiles + t];
    __syncthreads();
  }

  // Histogram of edges per row; split counts. A routed row has no edge and split count 1.
  for (int s = tid; s < slots; s += kSmallThreads) {
    const int q = s >> lkp;
    const bool routed = routed_rows && s_flags[q / qpt] != 0;
    int v = s_slot[s];
    if (routed && v >= 0) s_slot[s] = v = -1;
    if (v >= 0) atomicAdd(&s_count[v >> 16], 1);
    if ((s & (kp - 1)) == 0) p.split_counts[static_cast<std::int64_t>(q) * p.h_kv + h] = routed ? 1 : s_kept[q];
  }
  __syncthreads();

  // row_ptr: the exclusive scan of the counts, each thread a run of consecutive rows.
  {
    const int n = p.max_rows + 1;
    const int per = (n + kSmallThreads - 1) / kSmallThreads;
    const int r0 = min(tid * per, n), r1 = min(r0 + per, n);
    int sum = 0;
    for (int r = r0; r < r1; ++r) sum += s_count[r];
    int run = 0, total = 0;
    Scan(scan_tmp).ExclusiveSum(sum, run, total);
    std::int32_t* g_row_ptr = p.row_ptr + static_cast<std::int64_t>(h) * n;
    for (int r = r0; r < r1; ++r) {
      const int c = s_count[r];
      s_count[r] = run;  // from here on: the row's write cursor
      g_row_ptr[r] = run;
      run += c;
    }
    if (tid == 0) s_total = total;
  }
  __syncthreads();

  // Placement, a round of queries (slots [qa K', (qa + 64) K')) at a time. Shared-memory
  // atomics are 32-bit (a 64-bit OR would be a compare-and-swap loop, and a round's queries
  // mostly share the local block's row). Two mask buffers in turn: a round's leads (each
  // row's first query in it) advance their cursors while the next round sets its bits.
  std::int32_t* g_qsplit = p.qsplit + static_cast<std::int64_t>(h) * edges_cap;
  constexpr int kLead = static_cast<int>(0x80000000u);
  for (int qa = 0, round = 0; qa < p.total_q; qa += kSmallRoundQueries, ++round) {
    unsigned* mask = s_mask + (round & 1) * 2 * p.max_rows;
    if (round > 0) {
      unsigned* prev = s_mask + ((round - 1) & 1) * 2 * p.max_rows;
      const int s0 = (qa - kSmallRoundQueries) << lkp;
      for (int s = s0 + tid; s < (qa << lkp); s += kSmallThreads) {
        const int v = s_slot[s];
        if (v >= -1) continue;  // not a lead
        const int row = (v & ~kLead) >> 16;
        s_count[row] += __popc(prev[2 * row]) + __popc(prev[2 * row + 1]);
        prev[2 * row] = prev[2 * row + 1] = 0;
      }
    }
    const int s0 = qa << lkp, s1 = min(slots, (qa + kSmallRoundQueries) << lkp);
    for (int s = s0 + tid; s < s1; s += kSmallThreads) {
      const int v = s_slot[s];
      const int d = (s >> lkp) - qa;
      if (v >= 0) atomicOr(&mask[2 * (v >> 16) + (d >> 5)], 1u << (d & 31));
    }
    __syncthreads();
    for (int s = s0 + tid; s < s1; s += kSmallThreads) {
      const int v = s_slot[s];
      if (v < 0) continue;
      const int row = v >> 16;
      const int d = (s >> lkp) - qa;
      const unsigned lo = mask[2 * row], hi = mask[2 * row + 1];
      const int below = d < 32 ? __popc(lo & ((1u << d) - 1u)) : __popc(lo) + __popc(hi & ((1u << (d - 32)) - 1u));
      const int pos = s_count[row] + below;
      const int q_local = (v >> 5) & 2047;
      if (pos >= 0 && pos < edges_cap) g_qsplit[pos] = qsplit::encode(q_local, v & 31);
      if (below == 0) s_slot[s] = v | kLead;
    }
    __syncthreads();
  }

  // The tail past the head's last edge.
  for (std::int64_t i = s_total + tid; i < edges_cap; i += kSmallThreads) g_qsplit[i] = qsplit::kUnused;
}

// The finish grid: one CTA per KV head, each writing its head's work items. Dynamic shared
// memory: [max_rows] (b << 20 | block) of each row.
__global__ void __launch_bounds__(kSmallThreads, 1) k2q_small_finish_kernel(const BuildParams p) {
  using Scan = cub::BlockScan<int, kSmallThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ int s_rows[kSmallMaxBatch];
  __shared__ int s_first[kSmallThreads * kSmallItemsPerThread];  // a round's first item per entry
  extern __shared__ int s_coord[];
  const int tid = threadIdx.x;
  const int h = blockIdx.x;
  if (tid < p.batch) s_rows[tid] = request_blocks(p, tid);
  __syncthreads();
  // The row map reads only the batch, which the head CTAs do not write. Every CTA maps the rows
  // (its items carry their coordinates); CTA 0 also stores the map.
  for (int i = tid; i < p.batch * p.max_blocks; i += kSmallThreads) {
    const int b = i / p.max_blocks, l = i - b * p.max_blocks;
    if (l >= s_rows[b]) continue;
    const int row = small_row_of(s_rows, p.batch, b, l);
    if (h == 0) {
      p.row_coords[2 * static_cast<std::int64_t>(row)] = b;
      p.row_coords[2 * static_cast<std::int64_t>(row) + 1] = l;
    }
    s_coord[row] = (b << 20) | l;
  }
  if (h == 0 && tid == 0) {
    int rows = 0;
    for (int b = 0; b < p.batch; ++b) rows += s_rows[b];
    *p.total_rows = rows;
  }
  wait_for_previous_grid();  // row_ptr, route flags
  __syncthreads();

  const int stride = p.max_rows + 1;
  const int qpi = p.q_per_item;
  const auto row_items = [&](int head, int r) {
    const std::int32_t* rp = p.row_ptr + static_cast<std::int64_t>(head) * stride + r;
    return (rp[1] - rp[0] + qpi - 1) / qpi;
  };
  // The items of the heads before this one (the work list is in flat (head, row) order): where
  // this head's items start.
  int carry = 0;
  {
    int sum = 0;
    for (int e = tid; e < h * p.max_rows; e += kSmallThreads) {
      const int head = e / p.max_rows;
      sum += row_items(head, e - head * p.max_rows);
    }
    int ex = 0;
    Scan(scan_tmp).ExclusiveSum(sum, ex, carry);
    __syncthreads();  // scan_tmp is reused
  }

  // This head's items, a round of kSmallThreads * kSmallItemsPerThread rows at a time: each
  // thread counts the items of its consecutive rows, the scan puts every row's first item in
  // s_first, and then each thread writes every kSmallThreads-th item of the round, found by a
  // binary search over s_first. A warp so stores 32 consecutive items (24 bytes each); a thread
  // writing its own rows' items left them ~200 bytes apart.
  constexpr int kRound = kSmallThreads * kSmallItemsPerThread;
  const int n = p.max_rows;
  for (int base = 0; base < n; base += kRound) {
    const int r0 = base + tid * kSmallItemsPerThread;
    int items[kSmallItemsPerThread];
    int sum = 0;
#pragma unroll
    for (int k = 0; k < kSmallItemsPerThread; ++k) {
      items[k] = r0 + k < n ? row_items(h, r0 + k) : 0;
      sum += items[k];
    }
    int ex = 0, agg = 0;
    Scan(scan_tmp).ExclusiveSum(sum, ex, agg);
#pragma unroll
    for (int k = 0; k < kSmallItemsPerThread; ++k) {
      s_first[tid * kSmallItemsPerThread + k] = ex;
      ex += items[k];
    }
    __syncthreads();
    const int round_rows = min(kRound, n - base);
    for (int i = tid; i < agg; i += kSmallThreads) {
      // The last row of the round whose first item is <= i (it has items: the next row's first
      // is > i).
      const int lo = last_at_most(s_first, round_rows, i);
      const int r = base + lo;
      const int begin = p.row_ptr[h * stride + r];
      const int edges = p.row_ptr[h * stride + r + 1] - begin;
      const int first = (i - s_first[lo]) * qpi;
      const int w = carry + i;
      const int coord = s_coord[r];
      if (w < p.work_capacity)
        p.work[w] = WorkItem{h, r, begin + first, min(qpi, edges - first), coord >> 20, coord & 0xfffff};
    }
    carry += agg;
    __syncthreads();  // scan_tmp and s_first are reused
  }
  // The last head's CTA has counted every item.
  if (h == static_cast<int>(gridDim.x) - 1 && tid == 0) *p.work_count = min(carry, p.work_capacity);

  // The routed tiles, in rank order (tile_of_rank), by CTA 0.
  if (p.route_tile_out == nullptr || h != 0) return;
  compact_route_list<kSmallThreads, kSmallItemsPerThread>(p.route_tile_out, p.route_per_head, p.h_kv, p.union_list,
                                                          p.union_count, p.combine_list, p.combine_count, scan_tmp);
}

}  // namespace msa::cuda::k2q
