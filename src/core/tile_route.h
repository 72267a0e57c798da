// PrefillPath::kAuto: which CUDA prefill path each query tile takes, decided from two counts of
// the work each path would do for it. The planner decides on the device
// (src/cuda/plan/tile_route.cu, no host synchronisation); route_tiles_host is its CPU twin
// (the tests compare the two), and the host k2q builder takes the same routing.
#pragma once

#include <cstdint>
#include <vector>

#include "core/host_device.h"
#include "core/plan_encoding.h"

namespace msa {

// Tiles are those of the tile-union kernel: q_per_tile consecutive packed queries of one KV
// head (a tile may span requests; q_per_tile is the kernel's, cuda/prefill/sm90/tile_union/
// geometry.h), numbered head-major: tile = kv_head * tiles_per_head +
// q / q_per_tile. A tile's union is its set of distinct (request, valid block id) pairs; its
// edges are the distinct valid ids of its (query, KV head) rows, summed.
constexpr std::int64_t tiles_per_head(std::int64_t total_q, int q_per_tile) {
  return (total_q + q_per_tile - 1) / q_per_tile;
}

// The order in which the tile-union kernel runs tiles (and the routing lists them): heaviest
// first. Under the causal rule a later query tile of a head sees more blocks, so rank r is the
// tile of KV head r % h_kv at index per_head - 1 - r / h_kv of that head: the heads' last tiles
// first, interleaved. Spread over the CTAs on a snake, a schedule model puts every CTA's sum
// of blocks within 3% of the mean, where ascending ids left up to 1.34x at S = 2k
// (docs/performance.md, step 25). The device takes it in 32 bits (tile counts fit there).
template <class Int>
MSA_HOST_DEVICE Int tile_of_rank(Int r, Int per_head, int h_kv) {
  const Int h = r % h_kv;
  return h * per_head + (per_head - 1 - r / h_kv);
}

// The tile-union path loads and multiplies every union block for a whole 128-row tile; the
// block-major path pays per edge for the Q gather and the partial O written and read back.
// Measured per call (docs/performance.md, step 8) the union path wins while the union is well
// below a third of the edges (tile-shared: 1/8, 2.1x faster); at clustered(0.25), just under a
// third, it is 14% slower, at random 32k (about 0.85) 2x slower. The cut is a quarter.
MSA_HOST_DEVICE constexpr bool union_path_wins(std::uint64_t union_blocks, std::uint64_t edges) {
  return 4 * union_blocks <= edges;
}

// A routing of the tiles of one problem: union_tile[tile] != 0 sends the tile's (query, KV
// head) rows to the tile-union kernel; the k2q plan then holds none of their edges and gives
// them split count 1 (the union kernel writes their whole result into slot 0). Empty (null
// union_tile): every row is block-major.
struct TileRoute {
  int q_per_tile = 0;
  const std::uint8_t* union_tile = nullptr;  // [h_kv, tiles_per_head(total_q, q_per_tile)]
  bool routed(int kv_head, std::int64_t q, std::int64_t per_head) const {
    return union_tile != nullptr && union_tile[kv_head * per_head + q / q_per_tile] != 0;
  }
};

// PrefillPath::kAuto without a device plan: true when the batch alone bounds every tile's union
// by a full tile's break-even, q_per_tile * topk / 4 blocks (union_path_wins with every query
// choosing topk blocks), so that every tile may run on the tile-union kernel unrouted and plan()
// builds nothing. A tile's union is at most, summed over the requests it holds, the blocks its
// last query of that request sees (causal, below k_len), and topk per query. With the batch on
// the device (cu_seqlens_q / k_len null) every request a tile may hold (min(batch, q_per_tile))
// counts ceil(max_k_len / 128) blocks.
// Under MSA's top-k (every query chooses min(topk, visible) blocks) a tile of one request whose
// queries see at most that many blocks is routed to the union kernel by the device rule too.
bool union_only_batch(const std::int32_t* cu_seqlens_q, const std::int32_t* k_len, std::int64_t batch,
                      std::int64_t max_k_len, int topk, int q_per_tile);

// The routing rule (union_path_wins per tile) on the host. topk [h_kv, total_q, topk]
// contiguous; cu_seqlens_q [batch + 1]; k_len [batch]. Returns [h_kv * tiles_per_head] flags.
std::vector<std::uint8_t> route_tiles_host(const std::int32_t* topk, const std::int32_t* cu_seqlens_q,
                                           const std::int32_t* k_len, int batch, int h_kv, std::int64_t total_q,
                                           int topk_width, int q_per_tile);

}  // namespace msa
