// PrefillPath::kAuto: which CUDA prefill path a problem takes, decided from two counts of the
// work each path would do. The planner counts them on the device (src/cuda/plan/union_stats.cu,
// no host synchronisation); union_stats_host is its CPU twin (tests compare the two).
#pragma once

#include <cstdint>

namespace msa {

// Tiles are those of the tile-union kernel: q_per_tile consecutive queries of one KV head,
// numbered head-major; a tile's union is its set of distinct (request, valid block id) pairs.
// Only a deterministic sample is counted: every union_stats_stride(tiles)-th tile.
struct UnionStats {
  std::uint64_t union_blocks = 0;  // sum over sampled tiles of the tile's union size
  std::uint64_t edges = 0;         // sum over their (query, KV head) rows of distinct valid ids
};

// At most about 4096 tiles are counted, so that the count stays a small part of the plan.
constexpr std::int64_t union_stats_stride(std::int64_t tiles) { return tiles > 4096 ? tiles / 4096 : 1; }

// The tile-union path loads and multiplies every union block for a whole 128-row tile; the
// block-major path pays per edge for the Q gather, the partial O written and read back.
// Measured (docs/performance.md, step 8) the union path wins while a tile's union is well below
// a third of its edges (tile-shared: 1/8, 2.1x faster); at clustered(0.25), just under a third,
// it is 14% slower, at random 32k (about 0.85) 2x slower. The cut is a quarter.
#if defined(__CUDACC__)
__host__ __device__
#endif
constexpr bool union_path_wins(std::uint64_t union_blocks, std::uint64_t edges) {
  return 4 * union_blocks <= edges;
}

// topk [h_kv, total_q, topk] contiguous; cu_seqlens_q [batch + 1]; k_len [batch].
UnionStats union_stats_host(const std::int32_t* topk, const std::int32_t* cu_seqlens_q,
                            const std::int32_t* k_len, int batch, int h_kv, std::int64_t total_q,
                            int topk_width, int q_per_tile);

}  // namespace msa
