// Device counts for PrefillPath::kAuto (see core/union_stats.h): one warp per sampled (KV head,
// query tile) of the tile-union kernel counts the tile's union and its queries' edges; the totals
// land in out[0] (union blocks) and out[1] (edges). Capturable in a CUDA graph; no host
// synchronisation.
#pragma once

#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace msa::cuda {

struct UnionStatsParams {
  const std::int32_t* ids;           // [h_kv, total_q, topk], last dim contiguous
  std::int64_t stride_topk_head;
  std::int64_t stride_topk_token;
  const std::int32_t* cu_seqlens_q;  // [batch + 1]
  const std::int32_t* k_len;         // [batch]
  int batch;
  int h_kv;
  std::int64_t total_q;
  int topk;                          // 1..32
  int q_per_tile;                    // 1..16
  std::uint64_t* out;                // [2]: zeroed here, then (union blocks, edges)
};

void launch_union_stats(const UnionStatsParams& p, cudaStream_t stream);

}  // namespace msa::cuda
