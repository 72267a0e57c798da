// The planner's PrefillPath::kAuto routing, device side (rule and CPU twin: core/tile_route.h):
// the warp that routes one tile, and the CTA that compacts the flagged tiles into the
// tile-union kernel's list. The k2q planner's general path routes in CTAs of its row map's
// launch and compacts in a CTA of its finish launch (k2q_kernels.cuh); its small path routes
// its own way and compacts in CTA 0 of its finish launch (k2q_small_kernels.cuh). So the routing adds no
// launch of its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cub/block/block_scan.cuh>

#include "core/plan_encoding.h"
#include "core/tile_route.h"
#include "cuda/plan/tile_keys.cuh"
#include "cuda/plan/tile_route.h"
#include "cuda/prefill/sm90/tile_union/geometry.h"

namespace msa::cuda {

inline constexpr int kRouteWarps = 8;       // routing CTA: one warp per tile at a time
inline constexpr int kRouteMaxCtas = 4096;  // routing CTAs of a launch (warps then take more tiles)

// The instance (ids a lane holds: 4, 8 or 16) for tiles of `entries` = q_per_tile * topk.
__host__ __device__ constexpr int route_lane_entries(int entries) {
  return entries <= 4 * 32 ? 4 : entries <= 8 * 32 ? 8 : 16;
}
static_assert(route_lane_entries(kTileUnionMaxEntries) * 32 >= kTileUnionMaxEntries, "a tile's ids fit the lanes");

// A routing warp's shared memory, in ints: the tile's keys [entries], then its open-addressing
// table of the smallest power of two >= 2 * entries slots (at most half used).
__host__ __device__ constexpr int route_table_slots(int entries) {
  int slots = 2;
  while (slots < 2 * entries) slots <<= 1;
  return slots;
}
__host__ __device__ constexpr int route_warp_ints(int entries) { return entries + route_table_slots(entries); }
// A routing CTA's dynamic shared memory, in bytes.
__host__ __device__ constexpr std::size_t route_cta_smem_bytes(int entries) {
  return static_cast<std::size_t>(kRouteWarps) * route_warp_ints(entries) * sizeof(std::int32_t);
}
static_assert(kRouteWarps * route_warp_ints(kTileUnionMaxEntries) * 4 <= 48 * 1024,
              "the routing CTA's dynamic shared memory stays within the default 48 KB");

// Warp-collective (every lane of the warp calls it): routes `tile` (< h_kv * per_head) and
// writes its flag; kLaneEntries >= q_per_tile * topk / 32 (the ids a lane holds). Entry e =
// (tile query e / topk, slot e % topk) is held by lane e % 32 as its entry e / 32. The union
// counts each distinct (request, block) of the tile once (the keys of tile_keys.cuh, which the
// tile-union kernel's builders compute), and an entry counts as an edge when no earlier entry of
// its own row holds its block.
//
// The union is counted in the warp's shared memory (route_warp_ints), as one of two sets:
//   - a bitmap, where the tile's requests have at most 32 bits per int of the table's blocks in
//     all (the table holds 2 ints per entry of the tile or more, so 64 blocks per entry: a tile
//     of 8 queries of top-16 holds 8192 blocks, 1M tokens, across its requests): request s of
//     the tile owns bits [first_bit_s, first_bit_s + blocks_s), and an entry's
//     atomicOr says whether its bit was new. Every entry's goes out at once, and no entry waits
//     on another's result;
//   - else an open-addressing table of the keys, at most half full, which every entry offers its
//     key to (atomicCAS, the first probes at once): the one offer that finds a free slot counts.
// Either set gives the same count in any order.
//
// The warp's loads go out together: lane i < nq finds query i's request (one binary search,
// shared through shuffles), and every id of the tile is loaded before any is used. Each entry
// searching its request and loading its id in turn left the warp waiting on a chain of global
// loads per 32 entries (docs/performance.md, step 36). When topk divides 32, so that a row's
// entries are adjacent lanes of one register, one warp match per register finds each row's
// repeated blocks (else each entry compares with the earlier ones of its row in shared memory).
// The table's probe chains, a register at a time, and those compares had made a tile of 128
// entries on a 128k prefix take 4-9 us (step 43).
// The counts route_tile found for its tile, the same in every lane.
struct RoutedTile {
  bool wins;        // union_path_wins: the tile's flag
  unsigned unions;  // its union's blocks
  unsigned edges;   // its rows' edges
};

template <int kLaneEntries>
__device__ __forceinline__ RoutedTile route_tile(const TileRouteParams& p, std::int64_t tile, std::int64_t per_head,
                                                 int lane, std::int32_t* s_key, std::int32_t* s_table) {
  constexpr unsigned kFull = 0xffffffffu;
  const int h = static_cast<int>(tile / per_head);
  const std::int64_t q0 = (tile - h * per_head) * p.q_per_tile;
  const int nq = static_cast<int>(min(std::int64_t(p.q_per_tile), p.total_q - q0));
  const int n = nq * p.topk;  // <= 32 * kLaneEntries
  const int bits = 31 - __clz(route_table_slots(n));
  const unsigned slots = 1u << bits;

  int segment = 0, blocks = 0;  // of query q0 + lane
  if (lane < nq) {
    const TileQuery tq = locate_tile_query(p.cu_seqlens_q, p.k_len, p.batch, q0, q0 + lane, 0, kTileUnionNarrowQueries);
    segment = tq.segment;
    blocks = tq.blocks;
  }
  const std::int32_t* g_ids = p.ids + h * p.stride_topk_head + q0 * p.stride_topk_token;
  std::int32_t key[kLaneEntries];  // the id; then the entry's bit or key (kNone: none)
#pragma unroll
  for (int k = 0; k < kLaneEntries; ++k) {
    const int e = lane + 32 * k;
    const int i = e / p.topk;
    key[k] = e < n ? __ldg(g_ids + i * p.stride_topk_token + (e - i * p.topk)) : -1;
  }

  // The first bit of each query's request: the blocks of the tile's requests before it (a
  // request's queries are adjacent lanes; its first one adds its blocks to the scan).
  const int segment_before = __shfl_up_sync(kFull, segment, 1);  // every lane: a full-warp shuffle
  const bool seg_first = lane < nq && (lane == 0 || segment_before != segment);
  int first_bit = seg_first ? blocks : 0;
  for (int off = 1; off < 32; off <<= 1) {
    const int v = __shfl_up_sync(kFull, first_bit, off);
    if (lane >= off) first_bit += v;
  }
  const int total_bits = __shfl_sync(kFull, first_bit, 31);  // lanes past nq add nothing
  first_bit -= blocks;
  const bool bitmap = static_cast<long long>(total_bits) <= 32ll * slots;  // warp-uniform
  const int words = bitmap ? (total_bits + 31) / 32 : static_cast<int>(slots);
  for (int i = lane; i < words; i += 32) s_table[i] = bitmap ? 0 : union_key::kNone;
#pragma unroll
  for (int k = 0; k < kLaneEntries; ++k) {
    if (32 * k >= n) break;  // warp-uniform
    const int e = lane + 32 * k;
    const int i = min(e / p.topk, 31);
    const int seg = __shfl_sync(kFull, segment, i);
    const int blk = __shfl_sync(kFull, blocks, i);
    const int bit0 = __shfl_sync(kFull, first_bit, i);
    // (bit0 >= 0 always where the requests are as the contract has them: a request's queries
    // agree on its blocks.)
    const bool in = e < n && key[k] >= 0 && key[k] < blk && (!bitmap || bit0 >= 0);
    key[k] = !in ? union_key::kNone : bitmap ? bit0 + key[k] : union_key::encode(seg, key[k]);
  }
  __syncwarp();  // the set is clear

  // The set's atomics of up to kBatch registers go out at once (more would spill the 16-entry
  // instance in the row map launch).
  constexpr int kBatch = kLaneEntries < 8 ? kLaneEntries : 8;
  unsigned unions = 0, edges = 0;  // this lane's counts
#pragma unroll
  for (int k0 = 0; k0 < kLaneEntries; k0 += kBatch) {
    if (32 * k0 >= n) break;   // warp-uniform
    std::int32_t got[kBatch];  // a bitmap word, or the key a probe found
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int k = k0 + j;
      if (32 * k >= n) break;
      got[j] = key[k] == union_key::kNone ? 0
               : bitmap                   ? static_cast<std::int32_t>(
                              atomicOr(reinterpret_cast<unsigned*>(s_table) + (key[k] >> 5), 1u << (key[k] & 31)))
                        : atomicCAS(&s_table[union_key_home(key[k], bits)], union_key::kNone, key[k]);
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int k = k0 + j;
      if (32 * k >= n) break;
      if (key[k] == union_key::kNone) continue;
      bool fresh;  // the table: at most n < slots keys
      if (bitmap)
        fresh = (static_cast<unsigned>(got[j]) >> (key[k] & 31) & 1u) == 0u;
      else
        finish_union_offer(s_table, bits, key[k], union_key_home(key[k], bits), got[j], fresh);
      unions += fresh;
    }
  }
  if (32 % p.topk == 0) {  // a row is topk adjacent lanes of one register
    const unsigned row_lanes = (p.topk == 32 ? kFull : (1u << p.topk) - 1u) << (lane / p.topk * p.topk);
    const unsigned below = row_lanes & ((1u << lane) - 1u);
#pragma unroll
    for (int k = 0; k < kLaneEntries; ++k) {
      if (32 * k >= n) break;
      const unsigned peers = __match_any_sync(kFull, key[k]);
      edges += key[k] != union_key::kNone && (peers & below) == 0u;
    }
  } else {
#pragma unroll
    for (int k = 0; k < kLaneEntries; ++k)
      if (lane + 32 * k < n) s_key[lane + 32 * k] = key[k];
    __syncwarp();  // every key written
    for (int e = lane; e < n; e += 32) {
      const std::int32_t key_e = s_key[e];
      if (key_e == union_key::kNone) continue;
      bool first = true;
      for (int j = e - e % p.topk; j < e; ++j) first &= s_key[j] != key_e;
      edges += first;
    }
  }
  for (int off = 16; off > 0; off >>= 1) {
    unions += __shfl_xor_sync(kFull, unions, off);
    edges += __shfl_xor_sync(kFull, edges, off);
  }
  const bool wins = union_path_wins(unions, edges, p.group);
  if (lane == 0) p.union_tile[tile] = wins ? 1 : 0;
  __syncwarp();  // the caller's next tile overwrites the keys and the table
  return RoutedTile{wins, unions, edges};
}

// A warp's sums over the candidate tiles it routed (the routing decided for the call).
struct RouteSums {
  unsigned long long tiles = 0, unions = 0, edges = 0;
  // Counts `r` when route_tile flagged it (a candidate of the per-tile rule).
  __device__ __forceinline__ void add(const RoutedTile& r) {
    if (!r.wins) return;
    ++tiles;
    unions += r.unions;
    edges += r.edges;
  }
};

// CTA-collective (every thread; `mine`: each warp's sums, the same in its lanes): the sums of
// the CTA's warps, the same in every thread.
__device__ __forceinline__ RouteSums route_cta_sums(const RouteSums& mine) {
  __shared__ unsigned long long s_sums[3];
  if (threadIdx.x < 3) s_sums[threadIdx.x] = 0;
  __syncthreads();
  if (threadIdx.x % 32 == 0 && mine.tiles != 0) {
    atomicAdd(&s_sums[0], mine.tiles);
    atomicAdd(&s_sums[1], mine.unions);
    atomicAdd(&s_sums[2], mine.edges);
  }
  __syncthreads();
  RouteSums cta;
  cta.tiles = s_sums[0];
  cta.unions = s_sums[1];
  cta.edges = s_sums[2];
  __syncthreads();  // s_sums is read before a later call clears it
  return cta;
}

// Whether `tile` (< h_kv * per_head) spans requests: its first and last queries lie in different
// ones (request_of_query).
__device__ __forceinline__ bool tile_spans_requests(const TileRouteParams& p, std::int64_t tile,
                                                    std::int64_t per_head) {
  const std::int64_t q0 = tile % per_head * p.q_per_tile;
  const std::int64_t q1 = min(q0 + p.q_per_tile, p.total_q) - 1;
  return request_of_query(p.cu_seqlens_q, p.batch, q0, 0) != request_of_query(p.cu_seqlens_q, p.batch, q1, 0);
}

// One routing CTA (kRouteWarps warps), number `cta` of `ctas`: its warps take tiles cta *
// kRouteWarps + warp, then every ctas * kRouteWarps-th after it. s_route: the CTA's dynamic shared
// memory, route_warp_ints(q_per_tile * topk) ints per warp. spanning_only (the k2q planner's
// bitmap path, which routes the other tiles in its bits kernel, k2q_bitmap_kernels.cuh): only
// the tiles that span requests, which a warp finds 32 tiles at a time, a lane each. Returns the
// warp's sums over the tiles it flagged (the same in every lane).
template <int kLaneEntries>
__device__ __forceinline__ RouteSums route_cta(const TileRouteParams& p, int cta, int ctas, std::int32_t* s_route,
                                               bool spanning_only = false) {
  RouteSums sums;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int entries = p.q_per_tile * p.topk;
  std::int32_t* s_key = s_route + warp * route_warp_ints(entries);
  const std::int64_t per_head = tiles_per_head(p.total_q, p.q_per_tile);
  const std::int64_t tiles = per_head * p.h_kv;
  if (spanning_only && p.batch <= 1) return sums;  // one request: no tile spans two
  const int group = spanning_only ? 32 : 1;   // tiles a warp takes at a time
  for (std::int64_t base = (std::int64_t(cta) * kRouteWarps + warp) * group; base < tiles;
       base += std::int64_t(ctas) * kRouteWarps * group) {
    unsigned todo = 1u;  // the tiles of the group to route (warp-uniform)
    if (spanning_only)
      todo = __ballot_sync(0xffffffffu, base + lane < tiles && tile_spans_requests(p, base + lane, per_head));
    while (todo != 0u) {
      const int i = __ffs(todo) - 1;
      todo &= todo - 1u;
      sums.add(route_tile<kLaneEntries>(p, base + i, per_head, lane, s_key, s_key + entries));
    }
  }
  return sums;
}

// route_cta in the instance that holds the tile's entries (route_lane_entries), for a kernel
// that routes tiles of any size: it runs the smallest instance's code. The instances are
// straight-line code (their loops unrolled over a lane's entries), and a planner kernel's one
// pass over such code waits on instruction fetch: the grid path's routing of 128-entry tiles
// took 4.6 us in the 16-entry instance, 3.7 in the 4-entry one (docs/performance.md, step 72).
__device__ __forceinline__ RouteSums route_cta_fit(const TileRouteParams& p, int cta, int ctas, std::int32_t* s_route) {
  switch (route_lane_entries(p.q_per_tile * p.topk)) {
    case 4:
      return route_cta<4>(p, cta, ctas, s_route);
    case 8:
      return route_cta<8>(p, cta, ctas, s_route);
    default:
      return route_cta<16>(p, cta, ctas, s_route);
  }
}

// CTA-collective (every thread; `mine`: each warp's sums, the same in its lanes): the CTA's
// candidates' sums into p.call_slots[cta] (a cooperative planner launch's routing decided for
// the call).
__device__ __forceinline__ void route_call_slot_write(const TileRouteParams& p, int cta, const RouteSums& mine) {
  const RouteSums sums = route_cta_sums(mine);
  if (threadIdx.x == 0) p.call_slots[cta] = RouteCallSlot{sums.tiles, sums.unions, sums.edges};
}

// CTA-collective, after a grid barrier that follows every CTA's route_call_slot_write: the sums
// of the `ctas` slots, the call's candidates. A thread per slot (ctas <= blockDim.x: one load
// round trip at L2; other CTAs wrote them), then the warps' sums. Integer sums: every CTA gets
// the same.
__device__ __forceinline__ RouteSums route_call_total(const TileRouteParams& p, int ctas) {
  __shared__ unsigned long long s_warp[3][32];
  __shared__ RouteSums s_total;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int warps = static_cast<int>(blockDim.x + 31) / 32;
  unsigned long long v[3] = {0, 0, 0};
  for (int c = tid; c < ctas; c += static_cast<int>(blockDim.x)) {
    v[0] += __ldcg(&p.call_slots[c].tiles);
    v[1] += __ldcg(&p.call_slots[c].unions);
    v[2] += __ldcg(&p.call_slots[c].edges);
  }
#pragma unroll
  for (int k = 0; k < 3; ++k) {
    for (int off = 16; off > 0; off >>= 1) v[k] += __shfl_xor_sync(0xffffffffu, v[k], off);
    if (lane == 0) s_warp[k][warp] = v[k];
  }
  __syncthreads();
  if (tid == 0) {
    RouteSums sum;
    for (int w = 0; w < warps; ++w) {
      sum.tiles += s_warp[0][w];
      sum.unions += s_warp[1][w];
      sum.edges += s_warp[2][w];
    }
    s_total = sum;
  }
  __syncthreads();
  return s_total;
}

// Whether the call routes its candidates (route_call_pays on route_call_total), the same in
// every CTA.
__device__ __forceinline__ bool route_call_decide(const TileRouteParams& p, int ctas) {
  const RouteSums all = route_call_total(p, ctas);
  return route_call_pays(all.tiles, all.unions, all.edges, p.group);
}

// CTA-collective (all kThreads threads): the flagged tiles of `flags` [h_kv * per_head] in rank
// order (tile_of_rank) into list, their number into *count, and, when rest is set, the others in
// rank order into rest, their number into *rest_count (the rows the combine merges). kItems
// consecutive ranks per thread and one block scan per round. kAtL2: the flags are read at L2
// (other CTAs of the same launch wrote them, and this CTA's L1 may hold lines it read earlier).
template <int kThreads, int kItems, bool kAtL2 = false>
__device__ __forceinline__ void compact_route_list(const std::uint8_t* flags, int per_head, int h_kv,
                                                   std::int32_t* list, std::int32_t* count, std::int32_t* rest,
                                                   std::int32_t* rest_count,
                                                   typename cub::BlockScan<int, kThreads>::TempStorage& scan_tmp) {
  static_assert(kItems <= 32, "a thread's flags are the bits of one word");
  using Scan = cub::BlockScan<int, kThreads>;
  const int tid = threadIdx.x;
  const int tiles = h_kv * per_head;
  const auto tile_at = [&](int r) { return tile_of_rank(r, per_head, h_kv); };
  int listed = 0;
  for (int base = 0; base < tiles; base += kThreads * kItems) {
    const int r0 = base + tid * kItems;
    unsigned mine = 0;
#pragma unroll
    for (int k = 0; k < kItems; ++k)
      if (r0 + k < tiles && (kAtL2 ? __ldcg(flags + tile_at(r0 + k)) : flags[tile_at(r0 + k)]) != 0) mine |= 1u << k;
    int ex = 0, agg = 0;
    Scan(scan_tmp).ExclusiveSum(__popc(mine), ex, agg);
    int at = listed + ex;   // flagged ranks before r0
    int rest_at = r0 - at;  // the others before r0
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      if (mine >> k & 1u)
        list[at++] = tile_at(r0 + k);
      else if (rest != nullptr && r0 + k < tiles)
        rest[rest_at++] = tile_at(r0 + k);
    }
    listed += agg;
    __syncthreads();  // scan_tmp is reused
  }
  if (tid == 0) {
    *count = listed;
    if (rest != nullptr) *rest_count = tiles - listed;
  }
}

// The routing decided for the call, a launch of its own (launch_route_call; kRouteWarps warps a
// CTA, route_cta's tiles): each CTA adds its candidates' sums to the counters; the last CTA to
// finish (the count of CTAs done) reads them, clears every flag where route_call_pays says the
// call does not gain by its candidates, and lists the flagged tiles and the others.
template <int kLaneEntries>
__global__ void __launch_bounds__(kRouteWarps * 32)
    route_call_kernel(const TileRouteParams p, RouteCallCounters* counters) {
  constexpr int kThreads = kRouteWarps * 32;
  extern __shared__ __align__(16) std::int32_t s_route[];
  __shared__ int s_last;
  __shared__ typename cub::BlockScan<int, kThreads>::TempStorage scan_tmp;
  const int tid = threadIdx.x;
  const RouteSums cta =
      route_cta_sums(route_cta<kLaneEntries>(p, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x), s_route));
  if (tid == 0) {
    if (cta.tiles != 0) {
      atomicAdd(&counters->tiles, cta.tiles);
      atomicAdd(&counters->unions, cta.unions);
      atomicAdd(&counters->edges, cta.edges);
    }
    __threadfence();  // this CTA's flags and sums before its count
    s_last = atomicAdd(&counters->done, 1u) == gridDim.x - 1 ? 1 : 0;
  }
  __syncthreads();
  if (s_last == 0) return;
  __threadfence();
  const unsigned long long n = __ldcg(&counters->tiles), unions = __ldcg(&counters->unions),
                           edges = __ldcg(&counters->edges);
  const std::int64_t per_head = tiles_per_head(p.total_q, p.q_per_tile);
  const std::int64_t tiles = per_head * p.h_kv;
  if (!route_call_pays(n, unions, edges, p.group))
    for (std::int64_t t = tid; t < tiles; t += kThreads) p.union_tile[t] = 0;
  __threadfence();
  __syncthreads();
  compact_route_list<kThreads, 8, true>(p.union_tile, static_cast<int>(per_head), p.h_kv, p.union_list, p.union_count,
                                        p.combine_list, p.combine_count, scan_tmp);
}

}  // namespace msa::cuda
