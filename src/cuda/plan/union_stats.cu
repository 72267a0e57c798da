#include "cuda/plan/union_stats.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "core/union_stats.h"
#include "cuda/common/check.h"
#include "msa/error.h"

namespace msa::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kMaxEntries = 16 * 32;  // q_per_tile * topk

__global__ void __launch_bounds__(kWarps * 32) union_stats_kernel(const UnionStatsParams p) {
  __shared__ std::int32_t key[kWarps][kMaxEntries];  // block id, -1 ignored
  __shared__ std::int32_t req[kWarps][kMaxEntries];  // its request
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t per_head = (p.total_q + p.q_per_tile - 1) / p.q_per_tile;
  const std::int64_t tiles = per_head * p.h_kv;
  const std::int64_t stride = union_stats_stride(tiles);
  const std::int64_t samples = (tiles + stride - 1) / stride;
  unsigned long long unions = 0, edges = 0;  // this lane's counts
  for (std::int64_t sample = std::int64_t(blockIdx.x) * kWarps + warp; sample < samples;
       sample += std::int64_t(gridDim.x) * kWarps) {
    const std::int64_t tile = sample * stride;
    const int h = static_cast<int>(tile / per_head);
    const std::int64_t q0 = (tile - h * per_head) * p.q_per_tile;
    const int nq = static_cast<int>(std::min<std::int64_t>(p.q_per_tile, p.total_q - q0));
    const int n = nq * p.topk;
    for (int e = lane; e < n; e += 32) {
      const int i = e / p.topk;
      const std::int64_t q = q0 + i;
      int lo = 0, hi = p.batch - 1;  // the last request starting at or before q
      while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (p.cu_seqlens_q[mid] <= q) lo = mid;
        else hi = mid - 1;
      }
      const int blocks = (max(p.k_len[lo], 0) + 127) / 128;
      const std::int32_t id = p.ids[h * p.stride_topk_head + q * p.stride_topk_token + (e - i * p.topk)];
      key[warp][e] = id >= 0 && id < blocks ? id : -1;
      req[warp][e] = lo;
    }
    __syncwarp();
    for (int e = lane; e < n; e += 32) {
      const int k = key[warp][e];
      if (k < 0) continue;
      const int r = req[warp][e];
      const int row0 = e - e % p.topk;  // this query's first entry
      bool tile_first = true, row_first = true;
      for (int j = 0; j < e && (tile_first || row_first); ++j)
        if (key[warp][j] == k && req[warp][j] == r) {
          tile_first = false;
          if (j >= row0) row_first = false;
        }
      unions += tile_first;
      edges += row_first;
    }
    __syncwarp();  // the next tile overwrites key / req
  }
  for (int off = 16; off > 0; off >>= 1) {
    unions += __shfl_xor_sync(0xffffffffu, unions, off);
    edges += __shfl_xor_sync(0xffffffffu, edges, off);
  }
  if (lane == 0 && (unions | edges) != 0) {
    atomicAdd(reinterpret_cast<unsigned long long*>(&p.out[0]), unions);
    atomicAdd(reinterpret_cast<unsigned long long*>(&p.out[1]), edges);
  }
}

}  // namespace

void launch_union_stats(const UnionStatsParams& p, cudaStream_t stream) {
  if (p.topk < 1 || p.topk > 32 || p.q_per_tile < 1 || p.q_per_tile > 16 || p.batch < 1)
    throw Error("union_stats", "topk " + std::to_string(p.topk) + ", q_per_tile " + std::to_string(p.q_per_tile),
                "expected topk in 1..32, q_per_tile in 1..16 and batch >= 1");
  MSA_CUDA_CHECK(cudaMemsetAsync(p.out, 0, 2 * sizeof(std::uint64_t), stream));
  const std::int64_t tiles = (p.total_q + p.q_per_tile - 1) / p.q_per_tile * p.h_kv;
  if (tiles == 0) return;
  const std::int64_t samples = (tiles + union_stats_stride(tiles) - 1) / union_stats_stride(tiles);
  const auto grid = static_cast<unsigned>(std::min<std::int64_t>((samples + kWarps - 1) / kWarps, 1024));
  union_stats_kernel<<<grid, kWarps * 32, 0, stream>>>(p);
  MSA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace msa::cuda
