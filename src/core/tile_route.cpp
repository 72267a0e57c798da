#include "core/tile_route.h"

#include <algorithm>
#include <set>
#include <utility>

namespace msa {

std::vector<std::uint8_t> route_tiles_host(const std::int32_t* topk, const std::int32_t* cu_seqlens_q,
                                           const std::int32_t* k_len, int batch, int h_kv, std::int64_t total_q,
                                           int topk_width, int q_per_tile) {
  const std::int64_t per_head = tiles_per_head(total_q, q_per_tile);
  std::vector<std::uint8_t> route(static_cast<std::size_t>(per_head * h_kv), 0);
  for (std::int64_t tile = 0; tile < per_head * h_kv; ++tile) {
    const int h = static_cast<int>(tile / per_head);
    const std::int64_t q0 = (tile - h * per_head) * q_per_tile;
    std::set<std::pair<int, std::int32_t>> blocks_of_tile;  // (request, block)
    std::uint64_t edges = 0;
    int b = 0;
    for (std::int64_t q = q0; q < std::min<std::int64_t>(q0 + q_per_tile, total_q); ++q) {
      while (b + 1 < batch && cu_seqlens_q[b + 1] <= q) ++b;  // the request holding query q
      const std::int64_t blocks = (std::max(k_len[b], 0) + 127) / 128;
      std::set<std::int32_t> row;
      const std::int32_t* ids = topk + (std::int64_t(h) * total_q + q) * topk_width;
      for (int k = 0; k < topk_width; ++k)
        if (ids[k] >= 0 && ids[k] < blocks) row.insert(ids[k]);
      edges += row.size();
      for (std::int32_t id : row) blocks_of_tile.insert({b, id});
    }
    route[tile] = union_path_wins(blocks_of_tile.size(), edges) ? 1 : 0;
  }
  return route;
}

}  // namespace msa
