#include <algorithm>
#include <cstdint>

#include "cuda/indexer/launch.h"

namespace msa::cuda {

int indexer_chunk_cols(std::int64_t total_q, int queries_per_tile, int cols, int sm_count) {
  // About 4 units per SM; a unit of fewer than 16 columns would gather its 64 KB of Q for at
  // most 16 blocks (512 KB) of K.
  const std::int64_t tiles = std::max<std::int64_t>(1, (total_q + queries_per_tile - 1) / queries_per_tile);
  const std::int64_t want = (4 * std::int64_t{sm_count} + tiles - 1) / tiles;
  const std::int64_t most = std::max<std::int64_t>(1, cols / 16);
  const auto chunks = static_cast<int>(std::clamp<std::int64_t>(want, 1, most));
  return (cols + chunks - 1) / chunks;
}

}  // namespace msa::cuda
