#include "cuda/plan/tile_route.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cub/device/device_select.cuh>
#include <string>
#include <thrust/iterator/counting_iterator.h>

#include "core/tile_route.h"
#include "cuda/common/check.h"
#include "cuda/common/cub_temp.h"
#include "msa/error.h"

namespace msa::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kMaxEntries = 16 * 32;  // q_per_tile * topk

// Warp per tile: entry e = (tile query e / topk, slot e % topk) gets the key
// segment << 24 | block id, or -1 when the id is not a valid block of its request; the
// segment (0..15) is the request's first query in the tile, and ids are < 2^24 (k_len is int32).
// An entry counts towards the union when no earlier entry of the tile holds its key, and as an
// edge when no earlier entry of its own row does; scanning downwards, the first equal key
// settles both.
__global__ void __launch_bounds__(kWarps * 32) tile_route_kernel(const TileRouteParams p) {
  __shared__ std::int32_t key[kWarps][kMaxEntries];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t per_head = tiles_per_head(p.total_q, p.q_per_tile);
  const std::int64_t tiles = per_head * p.h_kv;
  for (std::int64_t tile = std::int64_t(blockIdx.x) * kWarps + warp; tile < tiles;
       tile += std::int64_t(gridDim.x) * kWarps) {
    const int h = static_cast<int>(tile / per_head);
    const std::int64_t q0 = (tile - h * per_head) * p.q_per_tile;
    const int nq = static_cast<int>(min(std::int64_t(p.q_per_tile), p.total_q - q0));
    const int n = nq * p.topk;
    int b0 = 0;  // the tile's first request: the last one starting at or before q0
    {
      int lo = 0, hi = p.batch - 1;
      while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (p.cu_seqlens_q[mid] <= q0) lo = mid;
        else hi = mid - 1;
      }
      b0 = lo;
    }
    for (int e = lane; e < n; e += 32) {
      const int i = e / p.topk;
      const std::int64_t q = q0 + i;
      int b = b0;  // requests of the tile: at most q_per_tile steps from b0
      while (b + 1 < p.batch && p.cu_seqlens_q[b + 1] <= q) ++b;
      const int blocks = (max(p.k_len[b], 0) + 127) / 128;
      const std::int32_t id = p.ids[h * p.stride_topk_head + q * p.stride_topk_token + (e - i * p.topk)];
      // The request's segment: its first query in the tile (requests between may be empty).
      const int seg = static_cast<int>(min(max(std::int64_t(p.cu_seqlens_q[b]) - q0, std::int64_t(0)), std::int64_t(15)));
      key[warp][e] = id >= 0 && id < blocks ? (seg << 24 | id) : -1;
    }
    __syncwarp();
    unsigned unions = 0, edges = 0;  // this lane's counts
    for (int e = lane; e < n; e += 32) {
      const int k = key[warp][e];
      if (k < 0) continue;
      const int row0 = e - e % p.topk;  // this query's first entry
      int found = -1;
      for (int j = e - 1; j >= 0; --j)
        if (key[warp][j] == k) {
          found = j;
          break;
        }
      unions += found < 0;
      edges += found < row0;
    }
    for (int off = 16; off > 0; off >>= 1) {
      unions += __shfl_xor_sync(0xffffffffu, unions, off);
      edges += __shfl_xor_sync(0xffffffffu, edges, off);
    }
    if (lane == 0) p.union_tile[tile] = union_path_wins(unions, edges) ? 1 : 0;
    __syncwarp();  // the next tile overwrites key
  }
}

void check(const TileRouteParams& p) {
  if (p.topk < 1 || p.topk > 32 || p.q_per_tile < 1 || p.q_per_tile > 16 || p.batch < 1)
    throw Error("tile_route", "topk " + std::to_string(p.topk) + ", q_per_tile " + std::to_string(p.q_per_tile),
                "expected topk in 1..32, q_per_tile in 1..16 and batch >= 1");
  if (tile_route_tiles(p.h_kv, p.total_q, p.q_per_tile) > INT_MAX)
    throw Error("tile_route", std::to_string(tile_route_tiles(p.h_kv, p.total_q, p.q_per_tile)) + " tiles",
                "the routing numbers tiles in 32 bits");
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
  std::size_t bytes = 0;
  MSA_CUDA_CHECK(cub::DeviceSelect::Flagged(nullptr, bytes, thrust::counting_iterator<std::int32_t>(0), p.union_tile,
                                            p.union_list, p.union_count, tiles, stream));
  cub_temp_check(bytes, p.temp_bytes, "tile route scratch");
  MSA_CUDA_CHECK(cub::DeviceSelect::Flagged(p.temp, bytes, thrust::counting_iterator<std::int32_t>(0), p.union_tile,
                                            p.union_list, p.union_count, tiles, stream));
}

}  // namespace msa::cuda
