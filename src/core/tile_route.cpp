#include "core/tile_route.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <set>
#include <utility>

#include "msa/shapes.h"  // kBlockSize

namespace msa {

TileRouteCounts route_tiles_host_counts(const std::int32_t* topk, const std::int32_t* cu_seqlens_q,
                                        const std::int32_t* k_len, int batch, int h_kv, int group, std::int64_t total_q,
                                        int topk_width, int q_per_tile) {
  const std::int64_t per_head = tiles_per_head(total_q, q_per_tile);
  TileRouteCounts r;
  r.flags.assign(static_cast<std::size_t>(per_head * h_kv), 0);
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
    if (union_path_wins(blocks_of_tile.size(), edges, group)) {
      r.flags[static_cast<std::size_t>(tile)] = 1;
      ++r.tiles;
      r.unions += blocks_of_tile.size();
      r.edges += edges;
    }
  }
  return r;
}

std::vector<std::uint8_t> route_tiles_host(const std::int32_t* topk, const std::int32_t* cu_seqlens_q,
                                           const std::int32_t* k_len, int batch, int h_kv, int group,
                                           std::int64_t total_q, int topk_width, int q_per_tile) {
  return route_tiles_host_counts(topk, cu_seqlens_q, k_len, batch, h_kv, group, total_q, topk_width, q_per_tile).flags;
}

std::vector<std::uint8_t> route_call_host(const std::int32_t* topk, const std::int32_t* cu_seqlens_q,
                                          const std::int32_t* k_len, int batch, int h_kv, int group,
                                          std::int64_t total_q, int topk_width, int q_per_tile) {
  TileRouteCounts r =
      route_tiles_host_counts(topk, cu_seqlens_q, k_len, batch, h_kv, group, total_q, topk_width, q_per_tile);
  if (route_call_applies(static_cast<std::int64_t>(r.flags.size())) &&
      !route_call_pays(r.tiles, r.unions, r.edges, group))
    std::fill(r.flags.begin(), r.flags.end(), 0);
  return r.flags;
}

namespace {

// Edges of the queries at positions 0..x-1 of one request under MSA's top-k: position p sees
// p / 128 + 1 blocks and chooses min(topk, that) of them.
std::int64_t edges_below(std::int64_t x, int topk) {
  if (x <= 0) return 0;
  const std::int64_t full = x / kBlockSize, rem = x % kBlockSize, k = topk;
  const std::int64_t per_block = full <= k ? full * (full + 1) / 2 : k * (k + 1) / 2 + (full - k) * k;
  return per_block * kBlockSize + rem * std::min(k, full + 1);
}

}  // namespace

namespace {

// Walks the tiles of a batch as union_only_batch describes them (host batch: in ascending order,
// a run of equal full tiles at once; device batch: every tile at the bound), calling
// visit(union bound, edges, tiles) for each tile or run, while it returns true. Returns false
// when a visit stopped the walk.
template <class Visit>
bool walk_tile_bounds(const std::int32_t* cu_seqlens_q, const std::int32_t* k_len, std::int64_t batch,
                      std::int64_t total_q, std::int64_t max_k_len, int topk, int q_per_tile, Visit&& visit) {
  const auto add = [&](std::int64_t unions, std::int64_t edges, std::int64_t tiles) {
    return visit(static_cast<std::uint64_t>(unions), static_cast<std::uint64_t>(edges),
                 static_cast<std::uint64_t>(tiles));
  };
  if (cu_seqlens_q == nullptr || k_len == nullptr) {
    if (batch == 1 && total_q <= INT32_MAX && max_k_len <= INT32_MAX) {  // one request at the bound
      const std::int32_t cu[2] = {0, static_cast<std::int32_t>(total_q)};
      const auto kl = static_cast<std::int32_t>(std::max<std::int64_t>(max_k_len, 0));
      return walk_tile_bounds(cu, &kl, 1, total_q, max_k_len, topk, q_per_tile, visit);
    }
    // Every tile full, each of its requests at max_k_len.
    const std::int64_t blocks = (std::max<std::int64_t>(max_k_len, 0) + kBlockSize - 1) / kBlockSize;
    const std::int64_t unions =
        std::min(std::min<std::int64_t>(batch, q_per_tile) * blocks, std::int64_t(q_per_tile) * topk);
    const std::int64_t edges = std::int64_t(q_per_tile) * std::min<std::int64_t>(topk, blocks);
    return add(unions, edges, tiles_per_head(total_q, q_per_tile));
  }
  // The tiles in ascending order; a tile may hold the end of one request and the start of the next.
  std::int64_t unions = 0, edges = 0;
  std::int64_t tile = -1;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t q0 = cu_seqlens_q[b], q_len = cu_seqlens_q[b + 1] - q0;
    const std::int64_t q1 = std::min<std::int64_t>(cu_seqlens_q[b + 1], total_q);
    if (q1 <= q0) continue;
    const std::int64_t kl = std::max<std::int32_t>(k_len[b], 0);
    const std::int64_t kl_blocks = (kl + kBlockSize - 1) / kBlockSize;
    for (std::int64_t t = q0 / q_per_tile; t <= (q1 - 1) / q_per_tile; ++t) {
      if (t != tile) {
        if (tile >= 0 && !add(unions, edges, 1)) return false;
        tile = t;
        unions = edges = 0;
      }
      const std::int64_t first = std::max(q0, t * q_per_tile), last = std::min(q1, (t + 1) * q_per_tile) - 1;
      const std::int64_t p_first = kl - q_len + (first - q0), p_last = kl - q_len + (last - q0);
      if (first == t * q_per_tile && last == (t + 1) * q_per_tile - 1 && p_first >= 0 &&
          p_first / kBlockSize == p_last / kBlockSize) {
        // A run of full tiles of this request whose queries all see the same v blocks: each is
        // its own tile with union v and q_per_tile * min(topk, v) edges, so the run adds at
        // once (O(blocks) per request, not O(tiles)).
        const std::int64_t v = p_first / kBlockSize + 1;
        const std::int64_t block_end = v * kBlockSize - 1;
        const std::int64_t t_end = std::min(t + (block_end - p_last) / q_per_tile, q1 / q_per_tile - 1);
        if (!add(std::min<std::int64_t>(v, std::int64_t(q_per_tile) * topk),
                 std::int64_t(q_per_tile) * std::min<std::int64_t>(topk, v), t_end - t + 1))
          return false;
        t = t_end;
        tile = -1;  // the run is added; the next tile starts afresh
        continue;
      }
      const std::int64_t seen = p_last < 0 ? 0 : std::min(p_last / kBlockSize + 1, kl_blocks);
      unions += std::min(seen, (last - first + 1) * topk);
      edges += edges_below(p_last + 1, topk) - edges_below(p_first, topk);
    }
  }
  return tile < 0 || add(unions, edges, 1);
}

}  // namespace

bool union_only_batch(const std::int32_t* cu_seqlens_q, const std::int32_t* k_len, std::int64_t batch,
                      std::int64_t total_q, std::int64_t max_k_len, int h_kv, int group, int topk, int q_per_tile,
                      int routed_q_per_tile, std::uint64_t max_union) {
  if (batch <= 0 || total_q <= 0 || h_kv <= 0 || group <= 0 || topk <= 0 || q_per_tile <= 0) return false;
  if (routed_q_per_tile <= 0) routed_q_per_tile = q_per_tile;
  const std::uint64_t fixed = routed_call_cost(group, batch);
  const auto heads = static_cast<std::uint64_t>(h_kv);
  if (routed_q_per_tile != q_per_tile) {
    // Tiles of another size than the routed call's: every tile's union cost (and the largest
    // union, within max_union) first, then the routed call's work on its own tiles.
    std::uint64_t all = 0, largest = 0;
    if (!walk_tile_bounds(cu_seqlens_q, k_len, batch, total_q, max_k_len, topk, q_per_tile,
                          [&](std::uint64_t unions, std::uint64_t, std::uint64_t tiles) {
                            all += tiles * union_path_cost(unions);
                            largest = std::max(largest, unions);
                            return largest <= max_union;
                          }))
      return false;
    std::uint64_t chosen = 0;
    walk_tile_bounds(cu_seqlens_q, k_len, batch, total_q, max_k_len, topk, routed_q_per_tile,
                     [&](std::uint64_t unions, std::uint64_t edges, std::uint64_t tiles) {
                       chosen += tiles * std::min(union_path_cost(unions), block_major_path_cost(edges, group));
                       return true;
                     });
    const std::uint64_t routed = fixed + heads * chosen;
    return heads * all <= routed && kUnionSms * union_path_cost(largest) <= routed;
  }
  const std::uint64_t budget = fixed / heads;  // per KV head
  // Per KV head: the union kernel's cost beyond the per-tile choice, the choice's own cost, and
  // the largest tile's union bound.
  std::uint64_t excess = 0, chosen = 0, largest = 0;
  const auto add = [&](std::uint64_t unions, std::uint64_t edges, std::uint64_t tiles) {
    const std::uint64_t u = union_path_cost(unions), b = block_major_path_cost(edges, group);
    excess += tiles * (u > b ? u - b : 0);
    chosen += tiles * std::min(u, b);
    largest = std::max(largest, unions);
    return excess <= budget && largest <= max_union;
  };
  // The critical path: the largest tile, run by one CTA, within the routed call's time.
  return walk_tile_bounds(cu_seqlens_q, k_len, batch, total_q, max_k_len, topk, q_per_tile, add) &&
         kUnionSms * union_path_cost(largest) <= fixed + heads * chosen;
}

namespace {

// Distinct blocks that q queries choosing k of n blocks each, at random, are expected to touch:
// n (1 - (1 - k / n)^q), the power by squaring (plan() runs this per request, on the host: for
// 1024 one-query requests the model takes 17 us of host time this way, 57 us with std::pow,
// timed on the 2-core CI machine; 0.8 us for 64 requests).
double expected_union(std::int64_t q, std::int64_t k, std::int64_t n) {
  if (q <= 0 || n <= 0) return 0.0;
  if (k >= n) return static_cast<double>(n);
  double miss = 1.0, x = 1.0 - static_cast<double>(k) / static_cast<double>(n);
  for (std::int64_t e = q; e > 0; e >>= 1, x *= x)
    if (e & 1) miss *= x;
  return static_cast<double>(n) * (1.0 - miss);
}

}  // namespace

bool split_union_batch(const std::int32_t* cu_seqlens_q, const std::int32_t* k_len, std::int64_t batch,
                       std::int64_t total_q, std::int64_t max_k_len, int h_kv, int h_q, int d, int topk, int q_per_tile,
                       int splits) {
  if (batch <= 0 || total_q <= 0 || h_kv <= 0 || h_q <= 0 || d <= 0 || topk <= 0 || q_per_tile <= 0 || splits <= 0)
    return false;
  constexpr double kSplitBlockNs = 17.0, kSplitCtaBlockNs = 1800.0, kBlockMajorBlockNs = 20.0,
                   kBlockMajorEntryNs = 0.14, kBlockMajorPlanNs = 14000.0;
  double tile_blocks = 0.0, request_blocks = 0.0, entries = 0.0;  // per KV head
  double open = 0.0, widest = 0.0;  // the union of the tile being filled; the widest tile's
  // One request's q_len queries, packed from query q0, on kl keys.
  const auto add = [&](std::int64_t q0, std::int64_t q_len, std::int64_t kl) {
    const std::int64_t n = (std::max<std::int64_t>(kl, 0) + kBlockSize - 1) / kBlockSize;
    const std::int64_t k = std::min<std::int64_t>(topk, n);
    request_blocks += expected_union(q_len, k, n);
    entries += static_cast<double>(q_len) * static_cast<double>(k);
    // Its tiles' parts: up to the first tile boundary (joining the tile the request before left
    // open), whole tiles, the rest (opening the next).
    const std::int64_t head = std::min(q_len, (q_per_tile - q0 % q_per_tile) % q_per_tile);
    const std::int64_t whole = (q_len - head) / q_per_tile, tail = q_len - head - whole * q_per_tile;
    tile_blocks += expected_union(head, k, n) + static_cast<double>(whole) * expected_union(q_per_tile, k, n) +
                   expected_union(tail, k, n);
    open += expected_union(head, k, n);
    if (head > 0 && (q0 + head) % q_per_tile == 0) {
      widest = std::max(widest, open);
      open = 0.0;
    }
    if (whole > 0) widest = std::max(widest, expected_union(q_per_tile, k, n));
    open += expected_union(tail, k, n);
  };
  if (cu_seqlens_q == nullptr || k_len == nullptr) {
    // B requests of total_q / B queries (the first total_q % B one more), each at max_k_len.
    const std::int64_t each = total_q / batch, more = total_q % batch;
    std::int64_t q0 = 0;
    for (std::int64_t b = 0; b < batch && q0 < total_q; ++b) {
      const std::int64_t q = each + (b < more ? 1 : 0);
      add(q0, q, max_k_len);
      q0 += q;
    }
  } else {
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t q0 = cu_seqlens_q[b], q1 = std::min<std::int64_t>(cu_seqlens_q[b + 1], total_q);
      if (q1 > q0 && q0 >= 0) add(q0, q1 - q0, k_len[b]);
    }
  }
  widest = std::max(widest, open);
  const double scale = static_cast<double>(d) / 128.0;
  // The split's CTAs: every (KV head, tile) pair's splits, in waves of kSplitWaveCtas.
  const double ctas = static_cast<double>(h_kv) * static_cast<double>(tiles_per_head(total_q, q_per_tile)) * splits;
  const double waves = std::ceil(ctas / kSplitWaveCtas);
  const double split =
      std::max(kSplitBlockNs * tile_blocks * h_kv, kSplitCtaBlockNs * std::ceil(widest / splits) * waves) * scale;
  const double block_major =
      kBlockMajorPlanNs + (kBlockMajorBlockNs * request_blocks * h_kv + kBlockMajorEntryNs * entries * h_q) * scale;
  return split <= block_major;
}

int union_group_heads(std::int64_t kv_bytes_per_head, std::int64_t per_head, int h_kv, int ctas,
                      std::int64_t l2_bytes) {
  if (h_kv <= 1 || per_head <= 0) return std::max(h_kv, 1);
  // K/V within twice the L2 cache: the interleaved order keeps most of it resident, and groups
  // would only cost balance (docs/performance.md, step 47).
  if (kv_bytes_per_head <= 2 * l2_bytes / h_kv) return h_kv;
  const std::int64_t fit = kv_bytes_per_head > 0 ? (l2_bytes / 2) / kv_bytes_per_head : h_kv;
  const std::int64_t balance = (2 * std::int64_t(std::max(ctas, 1)) + per_head - 1) / per_head;
  return static_cast<int>(std::clamp<std::int64_t>(std::max(fit, balance), 1, h_kv));
}

bool block_major_kv_once(double kv_bytes, double partial_bytes, std::int64_t l2_bytes) {
  const auto l2 = static_cast<double>(l2_bytes);
  return l2_bytes > 0 && kv_bytes <= l2 && partial_bytes <= l2;
}

bool tile_unions_fit(const std::int32_t* cu_seqlens_q, const std::int32_t* k_len, std::int64_t batch,
                     std::int64_t total_q, std::int64_t max_k_len, int topk, int q_per_tile, std::uint64_t max_union) {
  if (batch <= 0 || total_q <= 0 || topk <= 0 || q_per_tile <= 0) return false;
  return walk_tile_bounds(cu_seqlens_q, k_len, batch, total_q, max_k_len, topk, q_per_tile,
                          [&](std::uint64_t unions, std::uint64_t, std::uint64_t) { return unions <= max_union; });
}

}  // namespace msa
