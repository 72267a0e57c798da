#include "cuda/plan/tile_route.h"

#include <cuda_runtime.h>

#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/permutation_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <algorithm>
#include <climits>
#include <cub/device/device_select.cuh>
#include <string>

#include "core/check.h"
#include "core/plan_encoding.h"
#include "core/tile_route.h"
#include "cuda/common/check.h"
#include "cuda/common/cub_temp.h"
#include "cuda/plan/tile_keys.cuh"
#include "msa/error.h"

namespace msa::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kMaxEntries = kTileUnionMaxEntries;                      // q_per_tile * topk
constexpr int kMaxTable = 2 * kMaxEntries;                             // key table slots, at most half used

// Warp per tile: entry e = (tile query e / topk, slot e % topk) gets its union key
// (plan/tile_keys.cuh, the same keys the tile-union kernel's builders compute). A key counts
// once towards the union: every entry offers it to an open-addressing table in shared memory
// (atomicCAS), and the one offer that finds a free slot counts it, in any order. An entry counts
// as an edge when no earlier entry of its own row holds its key (at most topk - 1 compares).
// A first-occurrence search over the whole tile took O(entries) per entry, most of the
// planner's routing time (docs/performance.md, step 30).
__global__ void __launch_bounds__(kWarps * 32) tile_route_kernel(const TileRouteParams p) {
  __shared__ std::int32_t key[kWarps][kMaxEntries];
  __shared__ std::int32_t table[kWarps][kMaxTable];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t per_head = tiles_per_head(p.total_q, p.q_per_tile);
  const std::int64_t tiles = per_head * p.h_kv;
  for (std::int64_t tile = std::int64_t(blockIdx.x) * kWarps + warp; tile < tiles;
       tile += std::int64_t(gridDim.x) * kWarps) {
    const int h = static_cast<int>(tile / per_head);
    const std::int64_t q0 = (tile - h * per_head) * p.q_per_tile;
    const int nq = static_cast<int>(min(std::int64_t(p.q_per_tile), p.total_q - q0));
    const int n = nq * p.topk;
    const int bits = 32 - __clz(2 * n - 1);  // a table of 2^bits >= 2 n slots (<= kMaxTable)
    const unsigned slots = 1u << bits;
    for (unsigned i = lane; i < slots; i += 32) table[warp][i] = union_key::kNone;
    __syncwarp();
    const int b0 = request_of_query(p.cu_seqlens_q, p.batch, q0, 0);  // the tile's first request
    unsigned unions = 0, edges = 0;                                   // this lane's counts
    for (int e = lane; e < n; e += 32) {
      const int i = e / p.topk;
      const std::int64_t q = q0 + i;
      const TileQuery tq = locate_tile_query(p.cu_seqlens_q, p.k_len, p.batch, q0, q, b0);
      const std::int32_t id = p.ids[h * p.stride_topk_head + q * p.stride_topk_token + (e - i * p.topk)];
      const std::int32_t k = union_key::of_id(tq.segment, id, tq.blocks);
      key[warp][e] = k;
      if (k == union_key::kNone) continue;
      bool fresh;
      offer_union_key(table[warp], bits, k, fresh);  // at most n < slots keys
      unions += fresh;
    }
    __syncwarp();  // every key written
    for (int e = lane; e < n; e += 32) {
      const int k = key[warp][e];
      if (k == union_key::kNone) continue;
      bool first = true;
      for (int j = e - e % p.topk; j < e; ++j) first &= key[warp][j] != k;
      edges += first;
    }
    for (int off = 16; off > 0; off >>= 1) {
      unions += __shfl_xor_sync(0xffffffffu, unions, off);
      edges += __shfl_xor_sync(0xffffffffu, edges, off);
    }
    if (lane == 0) p.union_tile[tile] = union_path_wins(unions, edges, p.group) ? 1 : 0;
    __syncwarp();  // the next tile overwrites key and table
  }
}

// Rank r -> its tile id (tile_of_rank), the order the list is compacted in.
struct TileOfRank {
  std::int32_t per_head;
  int h_kv;
  __host__ __device__ std::int32_t operator()(std::int32_t r) const { return tile_of_rank(r, per_head, h_kv); }
};

// The operator layer validated the problem (prefill_workspace() bounds the tile count).
void check(const TileRouteParams& p) {
  MSA_ASSERT(p.topk >= 1 && p.topk <= kTileUnionMaxTopk && p.q_per_tile >= 1 && p.q_per_tile <= kTileUnionMaxQueries &&
             p.q_per_tile * p.topk <= kMaxEntries && p.batch >= 1 && p.group >= 1);
  MSA_ASSERT(tile_route_tiles(p.h_kv, p.total_q, p.q_per_tile) <= INT_MAX / 2);
}

}  // namespace

std::int64_t tile_route_tiles(int h_kv, std::int64_t total_q, int q_per_tile) {
  return q_per_tile < 1 ? 0 : tiles_per_head(total_q, q_per_tile) * h_kv;
}

std::size_t tile_route_temp_bytes(std::int64_t tiles) { return cub_temp_bound(std::max<std::int64_t>(tiles, 1)); }

void launch_tile_route(const TileRouteParams& p, cudaStream_t stream) {
  check(p);
  const std::int64_t tiles = tile_route_tiles(p.h_kv, p.total_q, p.q_per_tile);
  if (tiles == 0) {
    MSA_CUDA_CHECK(cudaMemsetAsync(p.union_count, 0, sizeof(std::int32_t), stream));
    return;
  }
  const auto grid = static_cast<unsigned>(std::min<std::int64_t>((tiles + kWarps - 1) / kWarps, 4096));
  tile_route_kernel<<<grid, kWarps * 32, 0, stream>>>(p);
  MSA_CUDA_CHECK(cudaGetLastError());
  // The flagged tiles in rank order: the items are the tile ids of ranks 0, 1, ..., and each
  // item's flag is read through its id.
  const TileOfRank rank{static_cast<std::int32_t>(tiles_per_head(p.total_q, p.q_per_tile)), p.h_kv};
  const auto ids = thrust::make_transform_iterator(thrust::counting_iterator<std::int32_t>(0), rank);
  const auto flags = thrust::make_permutation_iterator(p.union_tile, ids);
  std::size_t bytes = 0;
  MSA_CUDA_CHECK(cub::DeviceSelect::Flagged(nullptr, bytes, ids, flags, p.union_list, p.union_count, tiles, stream));
  cub_temp_check(bytes, p.temp_bytes, "tile route scratch");
  MSA_CUDA_CHECK(cub::DeviceSelect::Flagged(p.temp, bytes, ids, flags, p.union_list, p.union_count, tiles, stream));
}

}  // namespace msa::cuda
