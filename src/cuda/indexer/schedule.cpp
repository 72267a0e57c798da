#include <algorithm>
#include <cstdint>

#include "cuda/indexer/launch.h"

namespace msa::cuda {

int indexer_chunk_cols(std::int64_t total_q, int queries_per_tile, int cols, int sm_count) {
  // Whole rows once the tiles fill three quarters of the SMs (splitting them measured slower:
  // docs/performance.md step 19); below that about 4 units per SM, where a unit of fewer than 16
  // columns would gather its 64 KB of Q for at most 16 blocks (512 KB) of K.
  const std::int64_t tiles = std::max<std::int64_t>(1, (total_q + queries_per_tile - 1) / queries_per_tile);
  if (4 * tiles >= 3 * std::int64_t{sm_count}) return cols;
  const std::int64_t want = (4 * std::int64_t{sm_count} + tiles - 1) / tiles;
  const std::int64_t most = std::max<std::int64_t>(1, cols / 16);
  const auto chunks = static_cast<int>(std::clamp<std::int64_t>(want, 1, most));
  return (cols + chunks - 1) / chunks;
}

IndexerTopkSplit indexer_topk_split(int h_i, int topk, const ProblemSize& problem) {
  IndexerTopkSplit s;
  const std::int64_t cols = (problem.max_k_len + kBlockSize - 1) / kBlockSize;
  s.cols = static_cast<int>(std::max<std::int64_t>(1, cols));
  s.list = topk <= 16 ? 15 : 31;
  // Tiles: each request's queries in tiles of queries_per_tile, so at least one per request
  // that has queries.
  const int per_tile = kIndexerTileRows / h_i;
  const std::int64_t tiles = std::max<std::int64_t>(
      {1, (problem.total_q + per_tile - 1) / per_tile, std::min(problem.batch, problem.total_q)});
  if (tiles >= kIndexerTopkWholeRowTiles) {
    s.chunk_cols = s.cols;
    return s;
  }
  // Units of at least 32 columns (a unit's list of 15 keys costs as many bytes as 30 scores, and
  // every column of a fresh list is an insertion), or of 16 where 32 would leave fewer units than
  // kIndexerTopkFewUnits (a short chunk's few tiles: parallelism first).
  const std::int64_t want = (kIndexerTopkUnits + tiles - 1) / tiles;
  const int min_cols = tiles * (s.cols / 32) >= kIndexerTopkFewUnits ? 32 : 16;
  const auto chunks = static_cast<int>(std::clamp<std::int64_t>(want, 1, std::max(1, s.cols / min_cols)));
  s.chunk_cols = (s.cols + chunks - 1) / chunks;
  s.chunks = (s.cols + s.chunk_cols - 1) / s.chunk_cols;
  if (s.chunks > 1)
    s.workspace_bytes = static_cast<std::size_t>(h_i) * static_cast<std::size_t>(problem.total_q) *
                        static_cast<std::size_t>(s.chunks) * static_cast<std::size_t>(s.list) * sizeof(std::uint64_t);
  return s;
}

}  // namespace msa::cuda
