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

// The same order over groups of group_heads KV heads (the last group may hold fewer): the groups
// one after another, each in tile_of_rank's order over its own heads; tile_of_rank itself when
// group_heads >= h_kv (or <= 0). A plan-free launch whose K/V exceeds the L2 cache takes it, so that the
// tiles running at once read the K/V of a few heads (union_group_heads).
template <class Int>
MSA_HOST_DEVICE Int tile_of_rank_grouped(Int r, Int per_head, int h_kv, int group_heads) {
  if (group_heads <= 0 || group_heads >= h_kv) return tile_of_rank(r, per_head, h_kv);
  const Int group_tiles = per_head * group_heads;
  const Int g = r / group_tiles;
  const int first = static_cast<int>(g) * group_heads;
  const int heads = h_kv - first < group_heads ? h_kv - first : group_heads;
  const Int rr = r - g * group_tiles;
  return (first + static_cast<int>(rr % heads)) * per_head + (per_head - 1 - rr / heads);
}

// The group size of tile_of_rank_grouped for a plan-free launch: h_kv (no groups) while the K/V
// of all heads (kv_bytes_per_head each) is within twice the L2 cache; beyond, as many KV heads as
// keep their K/V within half the L2 cache, but at least enough for two rounds of tiles over the
// CTAs (the snake schedule balances heaviest-first tiles round by round), and at most h_kv.
int union_group_heads(std::int64_t kv_bytes_per_head, std::int64_t per_head, int h_kv, int ctas, std::int64_t l2_bytes);

// Whether the block-major kernel loads K/V with EVICT_FIRST (instead of EVICT_LAST): where the
// call's K/V (kv_bytes, every KV head) and its partials (partial_bytes) each fit the L2 cache,
// the partials the kernel writes then stay there for the combine, and the blocks' later items
// still find them (docs/performance.md, steps 77 and 78). Elsewhere K/V keep EVICT_LAST: a
// block that many items read is read again from L2.
bool block_major_kv_once(double kv_bytes, double partial_bytes, std::int64_t l2_bytes);

// The routing's cost model, measured per GQA group G (docs/performance.md, step 31: the three
// paths at G = 1..16, S = 2k-24k, h_q 64, D 128, bf16, H100). The tile-union kernel costs about
// one step per union block of a tile, a 128-key block for its whole 128-row M tile, whatever
// share of those rows the tile's queries fill (q_per_tile * G): 14.5 ns of the whole GPU at
// G >= 4, 16 at G = 2, 18 at G = 1. The block-major path (its kernel and the combine) costs per
// 128 rows of edges (G rows per edge): 36.5 ns at G >= 8, 38.5 at G = 4, 45.5 at G = 2 and 85
// at G = 1, where every query was one TMA copy of 256 bytes in and one out. Fitted on the two
// fixed paths, the model gives their times within 1-14% and the automatic path's within 1-7%.
// Since step 85 (H200) the block-major steps of G = 1 and 2 copy their rows with threads and
// G = 1 items fill two M tiles: 41 ns per 128 rows at G = 1 against a union step of 14-16 ns
// (S = 8k-32k), as at G = 2 and 3 (39-41.5), so G = 1 takes G = 2's cost.
// Costs in eighths of a union block step:
inline constexpr std::uint64_t kUnionBlockCost = 8;
MSA_HOST_DEVICE constexpr std::uint64_t block_major_rows_cost(int group) {  // per 128 rows of edges
  return group >= 8 ? 20 : group >= 4 ? 21 : 22;
}
// A tile's cost on each path: union_blocks steps on the union kernel; edges * G rows on the
// block-major one (128 rows a step).
MSA_HOST_DEVICE constexpr std::uint64_t union_path_cost(std::uint64_t union_blocks) {
  return union_blocks * kUnionBlockCost * 128;
}
MSA_HOST_DEVICE constexpr std::uint64_t block_major_path_cost(std::uint64_t edges, int group) {
  return edges * static_cast<std::uint64_t>(group) * block_major_rows_cost(group);
}
// The per-tile rule: the union kernel takes the tile when it costs no more there. At G = 16 the
// cut is a union of 0.31 of the edges (tile-shared selections: 1/8; random at 32k: about 0.85),
// at G = 8 0.16, at G = 4 0.08, at G = 1 0.021.
MSA_HOST_DEVICE constexpr bool union_path_wins(std::uint64_t union_blocks, std::uint64_t edges, int group) {
  return union_path_cost(union_blocks) <= block_major_path_cost(edges, group);
}
// What a routed call costs beyond its kernels' work, in the same units: the plan's launches,
// the block-major kernel's and the combine's launches and tails, about 0.1 ms in all at S =
// 5k-8k (step 31), some 6900 union block steps. A planned call of one request at G >= 8 pays
// about half that today (3500 steps, about 50 us): with 6900 the chunks of 128-4096 new tokens
// on 8k it kept from a plan ran 6-40% longer than planned (docs/performance.md step 79). 6900 stays
// at G <= 4, where 3500 planned calls of 2048+ queries that the union kernel runs 4-17% faster,
// and for several requests, whose calls 3500 sent to the split tiles instead, 25-32% slower (a
// device batch's tile bounds take min(B, q_per_tile) requests at max_k_len in every tile).
inline constexpr std::uint64_t kRoutedCallCost = 6900 * kUnionBlockCost * 128;
MSA_HOST_DEVICE constexpr std::uint64_t routed_call_cost(int group, std::int64_t batch) {
  return group >= 8 && batch == 1 ? 3500 * kUnionBlockCost * 128 : kRoutedCallCost;
}
// The costs above are the GPU's time with every SM busy. The union kernel runs one CTA per SM
// (132 on the H100 and H200 they were fitted on) and a tile's union blocks in series, so a tile
// takes kUnionSms times its cost in time: with fewer tiles than SMs the largest tile bounds the
// call (16 new tokens on a 16k prefix: 2 tiles per KV head of 128 union blocks, 0.17 ms on the
// union kernel against 0.05 routed; docs/performance.md, step 32).
inline constexpr std::uint64_t kUnionSms = 132;
// A call of fewer (KV head, query tile) pairs than kUnionSms is not routed (PrefillPath::kAuto
// runs it on the block-major kernel alone): the union kernel's routed tiles then run one a CTA,
// so the call waits for the longest one's union blocks in series (at least topk of them), while
// each routed tile takes only its own share of the block-major kernel's work off the GPU. On
// the H200 at G = 16, 171 new tokens (88 tiles) ran 13% slower routed with random selections
// (none routed: the routing and the union kernel's launch), 2x slower with clustered ones (30%
// routed) and as fast with tile-shared ones (95%) (docs/performance.md, step 74). The price: a
// call whose every tile the rule routes has no such wait, and ran 1.3-1.6x faster routed
// (tile-shared selections on 96-128 tiles; step 75).
constexpr bool routing_may_pay(std::int64_t tiles) { return tiles >= static_cast<std::int64_t>(kUnionSms); }

// The routing decided for the call (docs/performance.md step 74). The per-tile rule picks the
// candidates; the call routes them only where the union kernel's expected makespan, plus the
// routing's own cost, is below the block-major work they take off the GPU. The union kernel runs
// the n candidates one a CTA at a time, in rounds of kUnionSms, each a chain of its union blocks
// (one step of kUnionSms * union_path_cost(1) units on one SM) and a tile's list, Q and stores
// (kRouteTileSteps10 / 10 steps); kRouteCallSteps10 / 10 steps are the routing in the plan and
// the union kernel's launch. Fitted on 33 calls on the H200 (G = 2-16, 171 to 32k queries,
// random, clustered and tile-shared selections). From kRouteCallRounds rounds on, the per-tile
// rule alone decides (the quantisation no longer counts, and the sums stay small); so the rule
// took the faster path on 32 of the 33 calls, and the other (clustered 4 x 2048 on 64k, five
// rounds) 1.2% slower. Integer arithmetic, so that the
// device and the CPU twin agree.
inline constexpr std::uint64_t kRouteTileSteps10 = 26;  // 5 us a tile on the H200
inline constexpr std::uint64_t kRouteCallSteps10 = 47;  // 9 us a call
inline constexpr std::uint64_t kRouteCallRounds = 8;
MSA_HOST_DEVICE constexpr bool route_call_pays(std::uint64_t n, std::uint64_t unions, std::uint64_t edges, int group) {
  if (n == 0) return false;
  const std::uint64_t rounds = (n + kUnionSms - 1) / kUnionSms;
  if (rounds >= kRouteCallRounds) return true;
  const std::uint64_t step = kUnionSms * union_path_cost(1);
  // rounds * (unions / n + 2.6) + 4.7 steps against the saved cost, all times 10 n
  return step * (rounds * (10 * unions + kRouteTileSteps10 * n) + kRouteCallSteps10 * n) <
         10 * n * block_major_path_cost(edges, group);
}

// The calls the routing is decided for: at most kRouteCallRounds rounds of tiles (larger calls'
// candidates are routed by the per-tile rule alone, where they reach that many rounds; on the
// device the planner's bitmap path folds their routing into its count, which a decision for the
// call would have to wait for).
inline constexpr std::uint64_t kRouteCallMaxTiles = kRouteCallRounds * kUnionSms;
constexpr bool route_call_applies(std::int64_t tiles) {
  return tiles >= 0 && static_cast<std::uint64_t>(tiles) <= kRouteCallMaxTiles;
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

// PrefillPath::kAuto without a device plan: true when every tile on the tile-union kernel is
// estimated to cost no more than the routed call, its fixed cost (routed_call_cost) included;
// plan() then builds nothing. The estimate takes each tile's union at its bound (summed over
// the requests the tile holds: the blocks the tile's last query of that request sees, causal
// and below k_len, and topk per query) and its edges as MSA's top-k makes them (each query
// chooses min(topk, visible) blocks), and adds, over the tiles and KV heads, what the union
// kernel costs beyond the per-tile rule's choice; a tile whose bound the rule sends to the union
// kernel adds nothing. The sum stops once it passes the fixed cost, so long contexts decide
// after a few tiles. The largest tile's serial time (kUnionSms times its cost) must also fit in
// the routed call's time, so that a few large tiles (small chunks on long prefixes) are routed.
// With the batch on the device (cu_seqlens_q / k_len null) one request is taken at max_k_len
// with all total_q queries; more requests are each taken at max_k_len in every tile,
// min(batch, q_per_tile) of them a tile.
//
// A plan-free call may take tiles of more queries than a routed one (routed_q_per_tile, the
// routing's; 0: the same): the union kernel then costs less per row where the routed tiles
// fill few of its 128 rows (G <= 3). It is taken when every such tile's union cost, summed,
// and the largest one's serial time, fit the routed call: its fixed cost plus the per-tile
// rule's choice over the routed tiles. With max_union, also false when a tile's union bound
// exceeds it (the tiles of a plan-free call must fit the kernel's union list).
bool union_only_batch(const std::int32_t* cu_seqlens_q, const std::int32_t* k_len, std::int64_t batch,
                      std::int64_t total_q, std::int64_t max_k_len, int h_kv, int group, int topk, int q_per_tile,
                      int routed_q_per_tile = 0, std::uint64_t max_union = UINT64_MAX);

// True when no tile's union bound (the one union_only_batch takes) exceeds max_union: the
// union of a tile whose builders drop the blocks none of its queries can see (causal, below
// k_len) fits a list of max_union entries, whatever the top-k ids. A device batch (null
// cu_seqlens_q / k_len) is taken at max_k_len as union_only_batch does.
bool tile_unions_fit(const std::int32_t* cu_seqlens_q, const std::int32_t* k_len, std::int64_t batch,
                     std::int64_t total_q, std::int64_t max_k_len, int topk, int q_per_tile, std::uint64_t max_union);

// PrefillPath::kAuto's split small calls of 17..1024 queries (cuda/prefill/sm90/tile_union/
// geometry.h, prefill_split_wide): true when the union kernel's routed tiles of q_per_tile
// queries, each split `splits` ways over its union and merged by the combine, are estimated to
// cost no more than the block-major call with its device plan. The estimate takes each
// request's queries as choosing min(topk, blocks) of its ceil(k_len / 128) blocks at random, so
// that q of them are expected to touch blocks * (1 - (1 - k / blocks)^q) distinct blocks. The
// split reads each tile's union (a tile may hold the end of one request and the start of the
// next: their parts add), the block-major call each request's union once, so a request of many
// queries on few blocks makes its tiles read its blocks again and again. Times fitted on the
// H200 at D = 128 (docs/performance.md step 79: 132 eager calls taken both ways at h_kv 1, 2, 4,
// 8 and 64, G 1-16; steps 69-71 had fitted the same form when the planned calls took 5-24 us
// longer) and scaled by d / 128:
// - the split: the longer of 17 ns per tile union block and KV head (the GPU's bandwidth) and
//   1.8 us per block of the widest tile's split, times the waves of kSplitWaveCtas CTAs its
//   (KV head, tile) pairs' splits make (a CTA streams its blocks one after another: where the
//   pairs are many and split once, a CTA's share and not the GPU's bandwidth bounds the run);
// - the block-major call: 14 us for its plan, 20 ns per request union block and KV head, 0.14
//   ns per (query head, top-k entry).
// A device batch (null cu_seqlens_q / k_len) is taken as `batch` requests of equal shares of
// total_q, each at max_k_len: a batch whose queries are mostly one request's may then split where
// its host twin plans (one request of 64 queries on a 16k prefix beside empty ones: 12 us
// slower, docs/performance.md step 69).
inline constexpr int kSplitWaveCtas = 132;  // = kDecodeCtaTarget, a CTA a pair's split
bool split_union_batch(const std::int32_t* cu_seqlens_q, const std::int32_t* k_len, std::int64_t batch,
                       std::int64_t total_q, std::int64_t max_k_len, int h_kv, int h_q, int d, int topk, int q_per_tile,
                       int splits);
// A top-k that bounds nothing: tile_unions_fit with it bounds each tile's visible blocks
// (the blocks its last query of each request sees, summed over the requests).
inline constexpr int kAnyTopk = 1 << 30;

// The routing rule (union_path_wins per tile) on the host. topk [h_kv, total_q, topk]
// contiguous; cu_seqlens_q [batch + 1]; k_len [batch]; group = h_q / h_kv. Returns
// [h_kv * tiles_per_head] flags.
std::vector<std::uint8_t> route_tiles_host(const std::int32_t* topk, const std::int32_t* cu_seqlens_q,
                                           const std::int32_t* k_len, int batch, int h_kv, int group,
                                           std::int64_t total_q, int topk_width, int q_per_tile);
// The same, with the sums over the tiles it flags: their number, union blocks and edges.
struct TileRouteCounts {
  std::vector<std::uint8_t> flags;
  std::uint64_t tiles = 0, unions = 0, edges = 0;
};
TileRouteCounts route_tiles_host_counts(const std::int32_t* topk, const std::int32_t* cu_seqlens_q,
                                        const std::int32_t* k_len, int batch, int h_kv, int group, std::int64_t total_q,
                                        int topk_width, int q_per_tile);

// The routing plan() takes (cuda/api/prefill.cpp): route_tiles_host's candidates, all cleared
// where the call has at most kRouteCallMaxTiles tiles (route_call_applies) and route_call_pays
// says it does not gain by them.
std::vector<std::uint8_t> route_call_host(const std::int32_t* topk, const std::int32_t* cu_seqlens_q,
                                          const std::int32_t* k_len, int batch, int h_kv, int group,
                                          std::int64_t total_q, int topk_width, int q_per_tile);

}  // namespace msa
