#include "core/tile_route.h"

#include <algorithm>
#include <set>
#include <utility>

#include "msa/shapes.h"  // kBlockSize

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

bool union_only_batch(const std::int32_t* cu_seqlens_q, const std::int32_t* k_len, std::int64_t batch,
                      std::int64_t max_k_len, int topk, int q_per_tile) {
  const std::int64_t cap = std::int64_t(q_per_tile) * topk / 4;
  const std::int64_t blocks = (max_k_len + kBlockSize - 1) / kBlockSize;
  if (batch <= 0 || cap <= 0 || blocks > cap) return false;
  // Lengths unknown: a tile holds at most min(batch, q_per_tile) requests, each adding at most
  // `blocks`.
  if (cu_seqlens_q == nullptr || k_len == nullptr) return std::min<std::int64_t>(batch, q_per_tile) * blocks <= cap;
  // Tiles inside one request are bounded by max_k_len above; the tiles a request shares (its
  // first and last) sum their requests' bounds, in ascending tile order.
  std::int64_t tile = -1, bound = 0;
  const auto add = [&](std::int64_t t, std::int64_t seen_blocks) {
    if (t != tile) {
      tile = t;
      bound = 0;
    }
    bound += seen_blocks;
    return bound <= cap;
  };
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t q0 = cu_seqlens_q[b], q1 = cu_seqlens_q[b + 1];
    if (q1 <= q0) continue;
    const std::int64_t kl = std::max<std::int32_t>(k_len[b], 0);
    for (const std::int64_t t : {q0 / q_per_tile, (q1 - 1) / q_per_tile}) {
      const std::int64_t first = std::max(q0, t * q_per_tile), last = std::min(q1, (t + 1) * q_per_tile) - 1;
      // Visible blocks of the request's last query in the tile: position kl - q_len + local.
      const std::int64_t pos = kl - (q1 - q0) + (last - q0);
      const std::int64_t seen = std::clamp<std::int64_t>((std::min(pos + 1, kl) + kBlockSize - 1) / kBlockSize, 0,
                                                         (kl + kBlockSize - 1) / kBlockSize);
      if (!add(t, std::min(seen, (last - first + 1) * topk))) return false;
      if (q0 / q_per_tile == (q1 - 1) / q_per_tile) break;  // one tile: counted once
    }
  }
  return true;
}

}  // namespace msa
