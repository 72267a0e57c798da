// The CPU twin of the planner's PrefillPath::kAuto routing on hand-computed batches (a tile
// spanning two requests, duplicates, -1, negative and out-of-range ids), the rule's cut per G,
// the plan-free estimate, and the host k2q builder with a routing: routed rows have no edge and split count 1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "core/k2q_host.h"
#include "core/tile_route.h"
#include "cuda/prefill/sm90/tile_union/geometry.h"
#include "msa/msa.h"

namespace {

TEST(TileRoute, RoutesByUnionAgainstEdgesByHand) {
  // Request 0: 3 queries, k_len 300 (blocks 0..2); request 1: 2 queries, k_len 130 (0..1).
  const std::vector<std::int32_t> cu = {0, 3, 5}, k_len = {300, 130};
  const std::vector<std::int32_t> topk = {
      0, 0, -1,  // q0: {0}        -> 1 edge
      1, 2, 5,   // q1: {1, 2}     -> 2 (5 is past request 0's blocks)
      2, 1, 0,   // q2: {0, 1, 2}  -> 3
      0, 1, 1,   // q3 (request 1): {0, 1} -> 2
      1, -7, 0,  // q4 (request 1): {0, 1} -> 2
  };
  // G = 16: the union kernel takes a tile whose union is at most 0.3125 of its edges
  // (union_path_wins). Tiles of 4 queries: {q0..q3}: union {(0,0), (0,1), (0,2), (1,0), (1,1)}
  // = 5 > 8 * 0.3125: block-major; {q4}: union 2 > 2 * 0.3125: block-major.
  EXPECT_EQ(msa::route_tiles_host(topk.data(), cu.data(), k_len.data(), 2, 1, 16, 5, 3, 4),
            (std::vector<std::uint8_t>{0, 0}));
  // The same queries choosing alike: q0..q2 all {0, 1, 2}, q3 and q4 {0, 1}: tile 0 has
  // union 5 (requests differ) over 3 * 3 + 2 = 11 edges: still block-major; tiles of 2:
  // {q0, q1} union 3 over 6 edges: block-major; with 12 queries of one request it routes.
  const std::vector<std::int32_t> alike = {0, 1, 2, 2, 1, 0, 0, 2, 1, 0, 1, -1, 1, 0, -1};
  EXPECT_EQ(msa::route_tiles_host(alike.data(), cu.data(), k_len.data(), 2, 1, 16, 5, 3, 4),
            (std::vector<std::uint8_t>{0, 0}));
  const std::vector<std::int32_t> cu12 = {0, 12}, k_len12 = {300};
  std::vector<std::int32_t> shared;
  for (int q = 0; q < 12; ++q) shared.insert(shared.end(), {2, 0, 1});
  // Tiles of 4: union 3 over 12 edges (3.75 allowed at G = 16: routed; 1.875 at G = 8 and
  // 0.43 at G = 1: not); tiles of 2: 3 over 6 (not).
  EXPECT_EQ(msa::route_tiles_host(shared.data(), cu12.data(), k_len12.data(), 1, 1, 16, 12, 3, 4),
            (std::vector<std::uint8_t>{1, 1, 1}));
  EXPECT_EQ(msa::route_tiles_host(shared.data(), cu12.data(), k_len12.data(), 1, 1, 8, 12, 3, 4),
            (std::vector<std::uint8_t>{0, 0, 0}));
  EXPECT_EQ(msa::route_tiles_host(shared.data(), cu12.data(), k_len12.data(), 1, 1, 1, 12, 3, 4),
            (std::vector<std::uint8_t>{0, 0, 0}));
  EXPECT_EQ(msa::route_tiles_host(shared.data(), cu12.data(), k_len12.data(), 1, 1, 16, 12, 3, 2),
            (std::vector<std::uint8_t>(6, 0)));
}

// The cut per G: union * 8 * 128 <= edges * G * block_major_rows_cost(G), at 128 edges.
TEST(TileRoute, Threshold) {
  using msa::union_path_wins;
  EXPECT_TRUE(union_path_wins(16, 128, 16));  // tile-shared: one union for 8 queries x 16 blocks
  EXPECT_TRUE(union_path_wins(40, 128, 16));  // 40 * 1024 = 128 * 16 * 20
  EXPECT_FALSE(union_path_wins(41, 128, 16));
  EXPECT_FALSE(union_path_wins(110, 128, 16));  // random selections at 32k
  EXPECT_TRUE(union_path_wins(20, 128, 8));     // 128 * 8 * 20 = 20 * 1024
  EXPECT_FALSE(union_path_wins(21, 128, 8));
  EXPECT_TRUE(union_path_wins(10, 128, 4));  // 128 * 4 * 21 = 10.5 * 1024
  EXPECT_FALSE(union_path_wins(11, 128, 4));
  EXPECT_TRUE(union_path_wins(5, 128, 3));  // G = 2, 3 cost 22: 5.5 * 1024 at G = 2, 8.25 at 3
  EXPECT_TRUE(union_path_wins(8, 128, 3));
  EXPECT_FALSE(union_path_wins(9, 128, 3));
  EXPECT_TRUE(union_path_wins(2, 128, 1));  // 128 * 22 = 2.75 * 1024
  EXPECT_FALSE(union_path_wins(3, 128, 1));
  for (const int g : {1, 2, 4, 8, 16}) EXPECT_TRUE(union_path_wins(0, 0, g));  // nothing selected
  // The cut falls with G: the union kernel's step serves q_per_tile * G rows, a block-major
  // step 128 rows of edges.
  for (int g = 2; g <= 16; ++g)
    EXPECT_GE(msa::block_major_path_cost(1, g), msa::block_major_path_cost(1, g - 1)) << "G " << g;
}

// The routing decided for the call (route_call_pays): candidates of the per-tile rule routed
// only where the union kernel's rounds of them cost less than the block-major work they save.
TEST(TileRoute, CallRoutesWhereItsRoundsPay) {
  using msa::route_call_pays;
  EXPECT_FALSE(route_call_pays(0, 0, 0, 16));  // no candidate
  // Step 74's clustered 171-token chunk: 26 tiles of about 37 union blocks, 128 edges each, one
  // round of about 40 block steps against 8 steps of block-major work: not routed.
  EXPECT_FALSE(route_call_pays(26, 26 * 37, 26 * 128, 16));
  // Tile-shared 512-token chunk: 256 tiles of 16 blocks in two rounds (37 steps) against 78.
  EXPECT_TRUE(route_call_pays(256, 256 * 16, 256 * 128, 16));
  // The same tiles, one round short of a full one: 131 of them pay, 26 do not.
  EXPECT_TRUE(route_call_pays(131, 131 * 16, 131 * 128, 16));
  EXPECT_FALSE(route_call_pays(26, 26 * 16, 26 * 128, 16));
  // Quantisation: 133 tiles make a second round, which 132 did not.
  const auto pays = [](std::uint64_t n) { return route_call_pays(n, n * 30, n * 128, 16); };
  EXPECT_GT(static_cast<int>(pays(132)), static_cast<int>(pays(133)));
  // From kRouteCallRounds rounds the per-tile rule alone decides.
  EXPECT_TRUE(route_call_pays(msa::kRouteCallRounds * msa::kUnionSms, 1, 1, 16));
  // Hand-computed at the edge: n = 100 tiles of 20 blocks and 128 edges at G = 16, one round:
  // 135168 * (1 * (10 * 2000 + 26 * 100) + 47 * 100) = 135168 * 27300 = 3,690,086,400 against
  // 10 * 100 * (12800 * 16 * 20) = 4,096,000,000: routed; at 24 blocks (135168 * 31300 =
  // 4,230,758,400) not.
  EXPECT_TRUE(route_call_pays(100, 2000, 12800, 16));
  EXPECT_FALSE(route_call_pays(100, 2400, 12800, 16));
}

// route_call_host: route_tiles_host's flags, or none where the call does not pay.
TEST(TileRoute, CallHostTwinKeepsOrClearsTheCandidates) {
  // The calls it is decided for: up to kRouteCallRounds rounds of tiles.
  EXPECT_TRUE(msa::route_call_applies(1056));
  EXPECT_FALSE(msa::route_call_applies(1057));
  // One request on a 16k prefix whose first 264 queries all pick blocks 0-15 (33 candidate
  // tiles, one round that does not pay) and whose others pick 16 blocks apart from their
  // neighbours' (no candidate): cleared in 1056 tiles, kept in 1064 (the per-tile rule alone).
  for (const std::int64_t total_q : {std::int64_t{8448}, std::int64_t{8512}}) {
    const std::vector<std::int32_t> cu = {0, static_cast<std::int32_t>(total_q)};
    const std::vector<std::int32_t> k_len = {static_cast<std::int32_t>(total_q + 16384)};
    std::vector<std::int32_t> topk(static_cast<std::size_t>(total_q) * 16);
    for (std::int64_t q = 0; q < total_q; ++q)
      for (int j = 0; j < 16; ++j)
        topk[static_cast<std::size_t>(q * 16 + j)] = static_cast<std::int32_t>(q < 264 ? j : (q * 37 + j * 8) % 129);
    const auto tiles = msa::route_tiles_host(topk.data(), cu.data(), k_len.data(), 1, 1, 16, total_q, 16, 8);
    const auto call = msa::route_call_host(topk.data(), cu.data(), k_len.data(), 1, 1, 16, total_q, 16, 8);
    EXPECT_EQ(std::count(tiles.begin(), tiles.end(), 1), 33) << total_q;
    EXPECT_EQ(std::count(call.begin(), call.end(), 1), total_q / 8 > 1056 ? 33 : 0) << total_q;
  }
  // One request of 1056 queries on 2048 keys (16 blocks; every query picks every visible block:
  // a tile's union is its last query's blocks, 8..16), 132 tiles at G = 16: one round that pays.
  // The first 264 queries alone (33 tiles): their round does not.
  for (const std::int64_t total_q : {std::int64_t{1056}, std::int64_t{264}}) {
    const std::int32_t k = 2048;
    const std::vector<std::int32_t> cu = {0, static_cast<std::int32_t>(total_q)};
    const std::vector<std::int32_t> k_len = {static_cast<std::int32_t>(k - 1056 + total_q)};
    std::vector<std::int32_t> topk(static_cast<std::size_t>(total_q) * 16, -1);
    for (std::int64_t q = 0; q < total_q; ++q) {
      const std::int64_t visible = (k_len[0] - total_q + q) / 128 + 1;
      for (int j = 0; j < 16 && j < visible; ++j) topk[q * 16 + j] = j;
    }
    const auto tiles = msa::route_tiles_host(topk.data(), cu.data(), k_len.data(), 1, 1, 16, total_q, 16, 8);
    const auto call = msa::route_call_host(topk.data(), cu.data(), k_len.data(), 1, 1, 16, total_q, 16, 8);
    EXPECT_EQ(std::count(tiles.begin(), tiles.end(), 1), total_q / 8) << total_q;  // every tile a candidate
    if (total_q == 1056)
      EXPECT_EQ(call, tiles);
    else
      EXPECT_EQ(std::count(call.begin(), call.end(), 1), 0);
  }
}

// union_only_batch by hand at G = 16 (h_kv 4, topk 16, tiles of 8 queries): a tile adds
// union * 1024 - edges * 320 where that is positive; the call plans once the sum over the
// tiles, times the 4 heads, passes 3500 * 1024 for one request (routed_call_cost; 6900 * 1024 for
// several, and at G <= 4).
TEST(TileRoute, UnionOnlyBatchByHand) {
  using msa::union_only_batch;
  const auto one = [](std::int32_t q_len, std::int32_t k_len, int h_kv, int group) {
    const std::vector<std::int32_t> cu = {0, q_len}, kl = {k_len};
    return union_only_batch(cu.data(), kl.data(), 1, q_len, k_len, h_kv, group, 16, group >= 8 ? 128 / group : 16);
  };
  // One request of S tokens: a tile of positions sharing v visible blocks has union v and 128
  // edges once v >= 16, so it adds (v - 40) * 1024 past 40 blocks, 16 tiles per block: the sum
  // is 16 * 1024 * n (n + 1) / 2 for n = S / 128 - 40, 737 280 at n = 9 (S = 6272) against
  // 896 000 per head, 901 120 at n = 10 (S = 6400).
  EXPECT_TRUE(one(4096, 4096, 4, 16));
  EXPECT_TRUE(one(6272, 6272, 4, 16));
  EXPECT_FALSE(one(6400, 6400, 4, 16));
  EXPECT_FALSE(one(32768, 32768, 4, 16));
  // The same request at G = 1 (h_kv 64, tiles of 16 queries, cut 4.6 blocks of 256 edges):
  // planned from the first blocks on.
  EXPECT_FALSE(one(4096, 4096, 64, 1));
  EXPECT_TRUE(one(256, 256, 64, 1));  // 2 blocks at most: union 2 <= 16 queries' edges * 37 / 1024
  // The batch on the device, one request: taken at max_k_len with all total_q queries.
  EXPECT_TRUE(union_only_batch(nullptr, nullptr, 1, 6272, 6272, 4, 16, 16, 8));
  EXPECT_FALSE(union_only_batch(nullptr, nullptr, 1, 6400, 6400, 4, 16, 16, 8));
  // More requests on the device: every tile full, min(B, 8) requests at max_k_len each. Two on
  // 2560 tokens: union 40 over 128 edges adds nothing; on 2688 (21 blocks) 2048 a tile, so 75
  // tiles (600 queries) fit the budget and 1000 (8000 queries) do not.
  EXPECT_TRUE(union_only_batch(nullptr, nullptr, 2, 100000, 2560, 4, 16, 16, 8));
  EXPECT_TRUE(union_only_batch(nullptr, nullptr, 2, 600, 2688, 4, 16, 16, 8));
  EXPECT_FALSE(union_only_batch(nullptr, nullptr, 2, 8000, 2688, 4, 16, 16, 8));
  EXPECT_FALSE(union_only_batch(nullptr, nullptr, 0, 0, 0, 4, 16, 16, 8));
  EXPECT_FALSE(union_only_batch(nullptr, nullptr, 1, 0, 100, 4, 16, 16, 8));  // no query
  // Two host requests share tile 0 (queries 0-4 and 5-7), both at positions 4088-4095 of 4096
  // tokens: union 32 + 32 over 128 edges adds 24 576; tile 1 (5 queries) 32 * 1024 - 80 * 320,
  // within the budget. But only 2 tiles a head: tile 0 alone takes 132 * 64 * 1024 = 8 650 752,
  // more than the routed call's 6900 * 1024 + 4 * (40 960 + 25 600): planned. 3 blocks of
  // 4096 tokens (union 2 * 3 and 3) fit.
  const std::vector<std::int32_t> cu2 = {0, 5, 13}, k2 = {4096, 4096};
  EXPECT_FALSE(union_only_batch(cu2.data(), k2.data(), 2, 13, 4096, 4, 16, 16, 8));
  const std::vector<std::int32_t> k2s = {300, 300};
  EXPECT_TRUE(union_only_batch(cu2.data(), k2s.data(), 2, 13, 300, 4, 16, 16, 8));
  // The same at G = 1 with 64 KV heads: the budget is 110 400 a head; tile 0 (16 queries: 13)
  // adds 64 * 1024 - 13 * 16 * 37, within it, but its union of 64 is again the critical path.
  EXPECT_FALSE(union_only_batch(cu2.data(), k2.data(), 2, 13, 4096, 64, 1, 16, 16));
  EXPECT_TRUE(union_only_batch(cu2.data(), k2s.data(), 2, 13, 300, 64, 1, 16, 16));
  // Eight one-query requests on 8192 tokens in one tile: union 8 * 16 over 128 edges adds
  // 88 * 1024 once, within the budget, but one CTA a head runs 128 union blocks: planned; and
  // a thousand such tiles pass the budget.
  std::vector<std::int32_t> cu8(9), k8(8, 8192);
  for (int i = 0; i <= 8; ++i) cu8[static_cast<std::size_t>(i)] = i;
  EXPECT_FALSE(union_only_batch(cu8.data(), k8.data(), 8, 8, 8192, 4, 16, 16, 8));
  // The critical path (kUnionSms = 132 times the largest tile's union cost, against 3500 * 1024
  // for one request, 6900 * 1024 for several, plus the rule's choice over all tiles): 16 new
  // tokens on a 16k prefix make 2 tiles a head of union 128 (132 * 128 * 1024, routed); one new
  // token, one tile of union 16 (132 * 16 * 1024 = 2 162 688, plan-free); 4 one-token requests
  // on 64k in one tile, union 64 (routed).
  EXPECT_FALSE(one(16, 16384, 4, 16));
  EXPECT_TRUE(one(1, 16384, 4, 16));
  const std::vector<std::int32_t> cu4 = {0, 1, 2, 3, 4}, k4(4, 65536);
  EXPECT_FALSE(union_only_batch(cu4.data(), k4.data(), 4, 4, 65536, 4, 16, 16, 8));
  EXPECT_FALSE(union_only_batch(nullptr, nullptr, 4, 4, 65536, 4, 16, 16, 8));
  std::vector<std::int32_t> cu_many(8001), k_many(8000, 8192);
  for (int i = 0; i <= 8000; ++i) cu_many[static_cast<std::size_t>(i)] = i;
  EXPECT_FALSE(union_only_batch(cu_many.data(), k_many.data(), 8000, 8000, 8192, 4, 16, 16, 8));
}

// union_only_batch against its definition, query by query: each tile's union bound (per request
// in it, the blocks its last query there sees, at most topk per query) and edges (min(topk,
// visible) per query), what the union kernel costs beyond the rule's choice summed over the
// tiles and heads, against routed_call_cost; and the largest tile's serial time (kUnionSms times
// its union cost) against the routed call (routed_call_cost plus the rule's choice over every tile
// and head). Random batches near that budget (64 KV heads make it small), so both answers occur;
// tiles spanning requests, empty requests, q_len = k_len.
bool union_only_by_definition(const std::vector<std::int32_t>& cu, const std::vector<std::int32_t>& kl, int h_kv,
                              int group, int topk, int q_per_tile) {
  const std::int64_t total_q = cu.back();
  std::uint64_t excess = 0, chosen = 0, largest = 0;
  for (std::int64_t t0 = 0; t0 < total_q; t0 += q_per_tile) {
    std::uint64_t unions = 0, edges = 0;
    for (std::size_t b = 0; b + 1 < cu.size(); ++b) {
      const std::int64_t first = std::max<std::int64_t>(cu[b], t0);
      const std::int64_t last = std::min<std::int64_t>(cu[b + 1], t0 + q_per_tile) - 1;
      if (last < first) continue;
      const auto seen = [&](std::int64_t q) {  // blocks query q sees
        const std::int64_t pos = kl[b] - (cu[b + 1] - cu[b]) + (q - cu[b]);
        return pos < 0 ? std::int64_t(0) : pos / 128 + 1;
      };
      unions += static_cast<std::uint64_t>(std::min(seen(last), (last - first + 1) * topk));
      for (std::int64_t q = first; q <= last; ++q)
        edges += static_cast<std::uint64_t>(std::min<std::int64_t>(topk, seen(q)));
    }
    const std::uint64_t u = msa::union_path_cost(unions), bm = msa::block_major_path_cost(edges, group);
    excess += u > bm ? u - bm : 0;
    chosen += std::min(u, bm);
    largest = std::max(largest, unions);
  }
  const auto heads = static_cast<std::uint64_t>(h_kv);
  const std::uint64_t fixed = msa::routed_call_cost(group, static_cast<std::int64_t>(cu.size()) - 1);
  return excess * heads <= fixed && msa::kUnionSms * msa::union_path_cost(largest) <= fixed + heads * chosen;
}

TEST(TileRoute, UnionOnlyBatchMatchesItsDefinition) {
  std::mt19937 rng(31);
  int agreed_true = 0, agreed_false = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int group = std::vector<int>{1, 2, 4, 8, 16}[rng() % 5];
    const int topk = 1 + static_cast<int>(rng() % 32);
    const int q_per_tile = std::min({group <= 1 ? 128 : 128 / group, 512 / topk, 32});
    const int batch = 1 + static_cast<int>(rng() % 12);
    std::vector<std::int32_t> cu = {0}, kl;
    for (int b = 0; b < batch; ++b) {
      const int q_len = rng() % 5 == 0 ? 0 : static_cast<int>(rng() % 700);
      cu.push_back(cu.back() + q_len);
      kl.push_back(q_len + (rng() % 3 == 0 ? 0 : static_cast<int>(rng() % 3000)));
    }
    if (cu.back() == 0) continue;
    const int h_kv = 64 / group;
    const bool want = union_only_by_definition(cu, kl, h_kv, group, topk, q_per_tile);
    const std::int32_t max_k = *std::max_element(kl.begin(), kl.end());
    EXPECT_EQ(msa::union_only_batch(cu.data(), kl.data(), batch, cu.back(), max_k, h_kv, group, topk, q_per_tile),
              want)
        << "trial " << trial;
    (want ? agreed_true : agreed_false) += 1;
  }
  EXPECT_GT(agreed_true, 20);
  EXPECT_GT(agreed_false, 20);
}

// A random varlen batch: cu_seqlens_q and k_len of `batch` requests, a fifth of them with no
// query, the others with up to q_max - 1; each k_len its queries plus, two times in three, a
// cached prefix of up to prefix_max - 1 tokens.
std::pair<std::vector<std::int32_t>, std::vector<std::int32_t>> random_batch(std::mt19937& rng, int batch, int q_max,
                                                                             int prefix_max) {
  std::vector<std::int32_t> cu = {0}, kl;
  for (int b = 0; b < batch; ++b) {
    const int q_len = rng() % 5 == 0 ? 0 : static_cast<int>(rng() % static_cast<unsigned>(q_max));
    cu.push_back(cu.back() + q_len);
    kl.push_back(q_len + (rng() % 3 == 0 ? 0 : static_cast<int>(rng() % static_cast<unsigned>(prefix_max))));
  }
  return {cu, kl};
}

// tile_unions_fit against its definition: the largest union bound of a tile (union_only_by_
// definition's) fits max_union exactly when max_union is at least that; union_only_batch with
// that cap answers as without one, and false below it. Tiles of up to 128 queries, as a
// plan-free call at G <= 3 takes them.
std::uint64_t largest_union_by_definition(const std::vector<std::int32_t>& cu, const std::vector<std::int32_t>& kl,
                                          int topk, int q_per_tile) {
  std::uint64_t largest = 0;
  for (std::int64_t t0 = 0; t0 < cu.back(); t0 += q_per_tile) {
    std::uint64_t unions = 0;
    for (std::size_t b = 0; b + 1 < cu.size(); ++b) {
      const std::int64_t first = std::max<std::int64_t>(cu[b], t0);
      const std::int64_t last = std::min<std::int64_t>(cu[b + 1], t0 + q_per_tile) - 1;
      if (last < first) continue;
      const std::int64_t pos = kl[b] - (cu[b + 1] - cu[b]) + (last - cu[b]);
      unions += static_cast<std::uint64_t>(std::min(pos < 0 ? 0 : pos / 128 + 1, (last - first + 1) * topk));
    }
    largest = std::max(largest, unions);
  }
  return largest;
}

TEST(TileRoute, TileUnionsFitMatchesItsDefinition) {
  std::mt19937 rng(37);
  int capped = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int group = std::vector<int>{1, 2, 3, 16}[rng() % 4];
    const int topk = 1 + static_cast<int>(rng() % 32);
    const int q_per_tile = msa::cuda::tile_union_free_queries(group, topk);
    const int batch = 1 + static_cast<int>(rng() % 12);
    auto [cu, kl] = random_batch(rng, batch, 700, 90000);
    if (cu.back() == 0) continue;
    const std::uint64_t largest = largest_union_by_definition(cu, kl, topk, q_per_tile);
    const std::int32_t max_k = *std::max_element(kl.begin(), kl.end());
    EXPECT_TRUE(msa::tile_unions_fit(cu.data(), kl.data(), batch, cu.back(), max_k, topk, q_per_tile, largest))
        << "trial " << trial;
    const int h_kv = 64 / group;
    const bool uncapped =
        msa::union_only_batch(cu.data(), kl.data(), batch, cu.back(), max_k, h_kv, group, topk, q_per_tile);
    EXPECT_EQ(msa::union_only_batch(cu.data(), kl.data(), batch, cu.back(), max_k, h_kv, group, topk, q_per_tile,
                                    q_per_tile, largest),
              uncapped)
        << "trial " << trial;
    // The same walk with kAnyTopk bounds the tile's visible blocks (the wide tiles' bitmap).
    const std::uint64_t visible = largest_union_by_definition(cu, kl, msa::kAnyTopk, q_per_tile);
    EXPECT_TRUE(msa::tile_unions_fit(cu.data(), kl.data(), batch, cu.back(), max_k, msa::kAnyTopk, q_per_tile, visible))
        << "trial " << trial;
    if (visible > 0) {
      EXPECT_FALSE(
          msa::tile_unions_fit(cu.data(), kl.data(), batch, cu.back(), max_k, msa::kAnyTopk, q_per_tile, visible - 1))
          << "trial " << trial;
    }
    if (largest == 0) continue;
    ++capped;
    EXPECT_FALSE(msa::tile_unions_fit(cu.data(), kl.data(), batch, cu.back(), max_k, topk, q_per_tile, largest - 1))
        << "trial " << trial;
    EXPECT_FALSE(msa::union_only_batch(cu.data(), kl.data(), batch, cu.back(), max_k, h_kv, group, topk, q_per_tile, 0,
                                       largest - 1))
        << "trial " << trial;
  }
  EXPECT_GT(capped, 200);
}

// union_only_batch with plan-free tiles larger than the routed ones, against its definition:
// every large tile's union cost summed, and the largest one's serial time, against the routed
// call (routed_call_cost plus the per-tile rule's choice over the routed tiles); every large
// tile's union bound within max_union.
std::vector<std::pair<std::uint64_t, std::uint64_t>> tile_bounds_by_definition(const std::vector<std::int32_t>& cu,
                                                                               const std::vector<std::int32_t>& kl,
                                                                               int topk, int q_per_tile) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> tiles;  // (union bound, edges)
  for (std::int64_t t0 = 0; t0 < cu.back(); t0 += q_per_tile) {
    std::uint64_t unions = 0, edges = 0;
    for (std::size_t b = 0; b + 1 < cu.size(); ++b) {
      const std::int64_t first = std::max<std::int64_t>(cu[b], t0);
      const std::int64_t last = std::min<std::int64_t>(cu[b + 1], t0 + q_per_tile) - 1;
      if (last < first) continue;
      const auto seen = [&](std::int64_t q) {
        const std::int64_t pos = kl[b] - (cu[b + 1] - cu[b]) + (q - cu[b]);
        return pos < 0 ? std::int64_t(0) : pos / 128 + 1;
      };
      unions += static_cast<std::uint64_t>(std::min(seen(last), (last - first + 1) * topk));
      for (std::int64_t q = first; q <= last; ++q)
        edges += static_cast<std::uint64_t>(std::min<std::int64_t>(topk, seen(q)));
    }
    tiles.push_back({unions, edges});
  }
  return tiles;
}

TEST(TileRoute, WidePlanFreeTilesMatchTheirDefinition) {
  std::mt19937 rng(41);
  int agreed_true = 0, agreed_false = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int group = std::vector<int>{1, 2, 3}[rng() % 3];
    const int topk = 1 + static_cast<int>(rng() % 32);
    const int q_wide = msa::cuda::tile_union_free_queries(group, topk);
    const int q_routed = msa::cuda::tile_union_queries_per_tile(group, topk);
    const int batch = 1 + static_cast<int>(rng() % 6);
    auto [cu, kl] = random_batch(rng, batch, 9000, 20000);
    if (cu.back() == 0) continue;
    const int h_kv = 64 / group;
    const std::uint64_t max_union = rng() % 2 == 0 ? 512 : UINT64_MAX;
    std::uint64_t all = 0, largest = 0, chosen = 0;
    for (const auto& [u, e] : tile_bounds_by_definition(cu, kl, topk, q_wide)) {
      all += msa::union_path_cost(u);
      largest = std::max(largest, u);
    }
    for (const auto& [u, e] : tile_bounds_by_definition(cu, kl, topk, q_routed))
      chosen += std::min(msa::union_path_cost(u), msa::block_major_path_cost(e, group));
    const auto heads = static_cast<std::uint64_t>(h_kv);
    const std::uint64_t routed = msa::routed_call_cost(group, batch) + heads * chosen;
    const bool want =
        largest <= max_union && heads * all <= routed && msa::kUnionSms * msa::union_path_cost(largest) <= routed;
    const std::int32_t max_k = *std::max_element(kl.begin(), kl.end());
    EXPECT_EQ(msa::union_only_batch(cu.data(), kl.data(), batch, cu.back(), max_k, h_kv, group, topk, q_wide, q_routed,
                                    max_union),
              want)
        << "trial " << trial;
    (want ? agreed_true : agreed_false) += 1;
  }
  EXPECT_GT(agreed_true, 20);
  EXPECT_GT(agreed_false, 20);
}

// The plan-free tile size: 128 queries at G = 1 while every tile's union fits the list (one
// request whose last tile sees at most 512 blocks), the routed tiles' 32 or a routed call
// beyond; G = 16 keeps its 8-query tiles.
TEST(TileRoute, PlanFreeTilesHoldMoreQueriesAtSmallGroups) {
  using msa::cuda::plan_free_queries_per_tile;
  const auto one = [](std::int32_t s, int h_kv, int group) {
    const std::vector<std::int32_t> cu = {0, s}, kl = {s};
    return plan_free_queries_per_tile(cu.data(), kl.data(), 1, s, s, h_kv, group, 16);
  };
  EXPECT_EQ(one(2500, 64, 1), 128);
  EXPECT_EQ(one(8192, 64, 1), 128);
  // At 16k the routed call's block-major steps cost less (G = 1 block-major cost 22 since
  // docs/performance.md step 85: 5.35 ms there against 7.38 on the union kernel, H200).
  EXPECT_EQ(one(16384, 64, 1), 0);
  EXPECT_EQ(one(4096, 32, 2), 64);
  EXPECT_EQ(one(4096, 4, 16), 8);
  EXPECT_NE(one(80000, 64, 1), 128);  // the last tiles see 625 blocks: more than the list holds
  EXPECT_EQ(plan_free_queries_per_tile(nullptr, nullptr, 1, 2500, 2500, 64, 1, 16), 128);  // device batch
  EXPECT_EQ(msa::cuda::forced_union_queries_per_tile(nullptr, nullptr, 1, 80000, 80000, 1, 16), 32);
  EXPECT_EQ(msa::cuda::forced_union_queries_per_tile(nullptr, nullptr, 1, 60000, 60000, 1, 16), 128);
  // Wide tiles need every tile's visible blocks within the bitmap (kTileUnionMaxVisibleBlocks):
  // 128 one-query requests at top-1 have a union of at most 128 but see 128 x k_len / 128 blocks.
  for (const int blocks : {256, 257}) {
    std::vector<std::int32_t> cu1(129), kl1(128, blocks * 128);
    for (int b = 0; b <= 128; ++b) cu1[static_cast<std::size_t>(b)] = b;
    const bool fits = 128 * blocks <= msa::cuda::kTileUnionMaxVisibleBlocks;
    EXPECT_EQ(msa::cuda::wide_tiles_fit(cu1.data(), kl1.data(), 128, 128, blocks * 128, 128), fits) << blocks;
    EXPECT_EQ(msa::cuda::forced_union_queries_per_tile(cu1.data(), kl1.data(), 128, 128, blocks * 128, 1, 1),
              fits ? 128 : 32)
        << blocks;
  }
}

// split_union_batch by hand at G = 16 (h_q 64, h_kv 4, top-16, tiles of 8 queries, d 128), each
// call with the split count the route takes (prefill_union_splits: about a wave of 132 CTAs over
// the (KV head, tile) pairs, 1..16). One request of q queries on 4096 tokens (32 blocks, 16 chosen
// of 32 each) touches 32 (1 - 2^-q) blocks, about 32; a tile of 8, 32 (1 - 2^-8) = 31.875. At
// q = 256 (128 pairs, split once) the split's bandwidth term is 17 ns x 1020 x 4 = 69 360, its
// CTA term 1800 x 32 = 57 600; the block-major call 14 000 + 20 x 32 x 4 + 0.14 x 256 x 16 x 64 =
// 53 260: planned. At q = 128 (64 pairs, 2 splits), 34 680 against 34 910: split.
TEST(TileRoute, SplitUnionBatchByHand) {
  using msa::split_union_batch;
  const auto splits = [](int h_kv, std::int64_t total_q, int q_per_tile, std::int64_t k_len) {
    const std::int64_t pairs = h_kv * ((total_q + q_per_tile - 1) / q_per_tile), blocks = (k_len + 127) / 128;
    return static_cast<int>(std::clamp<std::int64_t>(std::min({132 / pairs, blocks, std::int64_t{16}}), 1, 16));
  };
  const auto one = [&](std::int32_t q, std::int32_t k_len, int h_kv, int h_q, int d) {
    const std::vector<std::int32_t> cu = {0, q}, kl = {k_len};
    const int q_per_tile = h_q / h_kv >= 8 ? 128 / (h_q / h_kv) : 32;
    return split_union_batch(cu.data(), kl.data(), 1, q, k_len, h_kv, h_q, d, 16, q_per_tile,
                             splits(h_kv, q, q_per_tile, k_len));
  };
  EXPECT_FALSE(one(256, 4096, 4, 64, 128));
  EXPECT_TRUE(one(128, 4096, 4, 64, 128));
  // At d = 64 every term but the plan halves: at q = 192 (96 pairs, split once) the split's
  // 57 600 (its CTA term) against 44 085 planned at d = 128, 28 800 against 14 000 + 30 085 / 2
  // = 29 043 split at d = 64.
  EXPECT_FALSE(one(192, 4096, 4, 64, 128));
  EXPECT_TRUE(one(192, 4096, 4, 64, 64));
  // Eight requests of 32 on 4096 tokens: each its own 4 tiles, 17 x 8 x 4 x 31.875 x 4 = 69 360
  // against 14 000 + 20 x 8 x 32 x 4 + 36 700 = 71 180: split, where one request of all 256
  // queries was planned.
  std::vector<std::int32_t> cu8(9), kl8(8, 4096);
  for (int b = 0; b <= 8; ++b) cu8[static_cast<std::size_t>(b)] = 32 * b;
  EXPECT_TRUE(split_union_batch(cu8.data(), kl8.data(), 8, 256, 4096, 4, 64, 128, 16, 8, 1));
  // A device batch (no per-request sizes) is taken as equal requests at max_k_len: 8 of 32 as
  // above; 2 of 128 (the tiles read 1020 blocks a head again, the requests 64: 69 360 against
  // 55 820) planned; one of 256 planned as the host request.
  EXPECT_TRUE(split_union_batch(nullptr, nullptr, 8, 256, 4096, 4, 64, 128, 16, 8, 1));
  EXPECT_FALSE(split_union_batch(nullptr, nullptr, 2, 256, 4096, 4, 64, 128, 16, 8, 1));
  EXPECT_FALSE(split_union_batch(nullptr, nullptr, 1, 256, 4096, 4, 64, 128, 16, 8, 1));
  // Shares differing by one query (a remainder): 3 requests of 86, 85 and 85.
  EXPECT_EQ(split_union_batch(nullptr, nullptr, 3, 256, 4096, 4, 64, 128, 16, 8, 1),
            split_union_batch(std::vector<std::int32_t>{0, 86, 171, 256}.data(),
                              std::vector<std::int32_t>{4096, 4096, 4096}.data(), 3, 256, 4096, 4, 64, 128, 16, 8, 1));
  // Where the CTAs bound the split: eight requests of 16 on 16k (64 pairs, split once) stream a
  // tile's 84.0 blocks each, 1800 x 85 = 153 000, above the bandwidth term (17 x 16 x 84.0 x 4 =
  // 91 412) and the block-major call's 104 598: planned. Split 4 ways (two waves of CTAs of 22
  // blocks: 79 200) the bandwidth term bounds it, 91 412: split.
  const std::vector<std::int32_t> cu16 = {0, 16, 32, 48, 64, 80, 96, 112, 128}, kl16(8, 16384);
  EXPECT_FALSE(split_union_batch(cu16.data(), kl16.data(), 8, 128, 16384, 4, 64, 128, 16, 8, 1));
  EXPECT_TRUE(split_union_batch(cu16.data(), kl16.data(), 8, 128, 16384, 4, 64, 128, 16, 8, 4));
  // Calls the model was fitted on (docs/performance.md step 79), far from its cut: 64 queries on
  // a 16k prefix (their 8 tiles read its blocks again) planned, 32 split; four requests of 16 on
  // 64k split, of 64 on 64k planned; at G = 1 (h_kv 64, 32-query tiles) one request of 64 on 64k
  // planned; at h_kv 1 (h_q 16) one request of 171 on 16k planned (27 000 against 22 689; 0.041
  // ms planned against 0.049 split in step 79's run), as is one of 512.
  EXPECT_FALSE(one(64, 16384, 4, 64, 128));
  EXPECT_TRUE(one(32, 16384, 4, 64, 128));
  const auto four = [&](std::int32_t q, std::int32_t k_len) {
    const std::vector<std::int32_t> cu = {0, q, 2 * q, 3 * q, 4 * q}, kl(4, k_len);
    return split_union_batch(cu.data(), kl.data(), 4, 4 * q, k_len, 4, 64, 128, 16, 8, splits(4, 4 * q, 8, k_len));
  };
  EXPECT_TRUE(four(16, 65536));
  EXPECT_FALSE(four(64, 65536));
  EXPECT_FALSE(one(64, 65536, 64, 64, 128));
  EXPECT_FALSE(one(171, 16384, 1, 16, 128));
  EXPECT_FALSE(one(512, 16384, 1, 16, 128));
  // Nothing to split, or no geometry: false.
  EXPECT_FALSE(split_union_batch(nullptr, nullptr, 1, 0, 4096, 4, 64, 128, 16, 8, 1));
  EXPECT_FALSE(split_union_batch(nullptr, nullptr, 0, 16, 4096, 4, 64, 128, 16, 8, 1));
  EXPECT_FALSE(split_union_batch(nullptr, nullptr, 1, 16, 4096, 4, 64, 128, 16, 0, 1));
  EXPECT_FALSE(split_union_batch(nullptr, nullptr, 1, 16, 4096, 4, 64, 128, 16, 8, 0));
}

// prefill_split_wide's range and its two cases: calls of 17..1024 queries on more than 4 blocks;
// a planned call by the cost model; a plan-free one only where its tiles are the routed ones and
// the split count is 2 or more.
TEST(TileRoute, PrefillSplitWideRule) {
  using msa::cuda::prefill_split_wide;
  const auto device = [](std::int64_t q, std::int64_t k_len, int free_q, int splits) {
    return prefill_split_wide(nullptr, nullptr, 1, q, k_len, 4, 64, 128, 16, free_q, splits);
  };
  // (Planned calls with the split count the route takes: 16 pairs, 8 splits; 5 blocks, 5.)
  EXPECT_TRUE(device(32, 16384, 0, 8));
  EXPECT_FALSE(device(16, 16384, 0, 8));  // the decode route's and prefill_split_union's range
  EXPECT_FALSE(device(32, 512, 0, 4));    // 4 blocks
  EXPECT_TRUE(device(32, 513, 0, 5));
  EXPECT_FALSE(device(64, 16384, 0, 4));  // the cost model plans it (32 pairs, 4 splits)
  EXPECT_TRUE(device(32, 1024, 8, 2));    // plan-free, routed tiles, split
  EXPECT_FALSE(device(32, 1024, 8, 1));   // a wave of tiles already
  EXPECT_FALSE(device(32, 1024, 16, 4));  // plan-free tiles of another size than the routed 8
  std::vector<std::int32_t> cu(1026), kl(1025, 20000);
  for (int b = 0; b <= 1025; ++b) cu[static_cast<std::size_t>(b)] = b;
  EXPECT_TRUE(prefill_split_wide(cu.data(), kl.data(), 1024, 1024, 20000, 4, 64, 128, 16, 0, 1));
  EXPECT_FALSE(prefill_split_wide(cu.data(), kl.data(), 1025, 1025, 20000, 4, 64, 128, 16, 0, 1));  // past 1024
}

// Every tile size a prefill or decode call can choose, at every GQA group and top-k, fits the
// instance it launches (the narrow one up to 32 queries and 512 top-k entries): at G = 4..7 with
// a large top-k the plan-free tiles are the routed ones, not the M tile's fill (the random-shape
// sweep's G = 4, top-31 call once chose 32-query narrow tiles of 992 entries).
TEST(TileRoute, EveryChosenTileSizeFitsItsInstance) {
  using namespace msa::cuda;
  const std::vector<std::int32_t> cu = {0, 3, 551}, kl = {13, 762};  // the sweep's batch
  int plan_free = 0;
  for (int group = 1; group <= 16; ++group) {
    for (int topk = 1; topk <= kTileUnionMaxTopk; ++topk) {
      const int routed = tile_union_queries_per_tile(group, topk);
      const int free = tile_union_free_queries(group, topk);
      EXPECT_TRUE(routed <= kTileUnionNarrowQueries && tile_union_tile_fits(routed, group, topk))
          << group << " " << topk;
      EXPECT_TRUE(free >= routed && tile_union_tile_fits(free, group, topk)) << group << " " << topk;
      EXPECT_TRUE(tile_union_tile_fits(tile_union_decode_queries(group), group, topk)) << group << " " << topk;
      for (const bool host : {true, false}) {
        const int q = plan_free_queries_per_tile(host ? cu.data() : nullptr, host ? kl.data() : nullptr, 2, 551, 762,
                                                 64 / group, group, topk);
        EXPECT_TRUE(q == 0 || (q >= routed && tile_union_tile_fits(q, group, topk)))
            << group << " " << topk << " " << q;
        plan_free += q > 0;
        const int forced = forced_union_queries_per_tile(host ? cu.data() : nullptr, host ? kl.data() : nullptr, 2, 551,
                                                         762, group, topk);
        EXPECT_TRUE(forced >= routed && tile_union_tile_fits(forced, group, topk))
            << group << " " << topk << " " << forced;
      }
    }
  }
  EXPECT_GT(plan_free, 0);
  EXPECT_EQ(tile_union_free_queries(4, 31), 16);
  EXPECT_FALSE(tile_union_tile_fits(32, 4, 31));  // 992 entries: past the narrow list
  EXPECT_TRUE(tile_union_tile_fits(64, 1, 32));   // 2048 entries: the wide list
  EXPECT_FALSE(tile_union_tile_fits(64, 3, 16));  // 192 rows
}

TEST(TileRoute, HostPlannerLeavesRoutedRowsOut) {
  // One request of 6 queries (k_len 384: blocks 0..2), 2 KV heads, topk 2, tiles of 2 queries.
  std::vector<std::int32_t> cu = {0, 6}, k_len = {384};
  std::vector<std::int32_t> ids = {0, 1, 1, 2, 0, 2, 2, -1, 1, 0, 0, 2,   // head 0
                                   1, 0, 2, 1, 0, 2, 1, -1, 2, 0, 0, 1};  // head 1
  const msa::VarlenBatch batch{msa::TensorView::contiguous(cu.data(), msa::DType::kInt32, {2}),
                               msa::TensorView::contiguous(k_len.data(), msa::DType::kInt32, {1})};
  const auto topk = msa::TensorView::contiguous(ids.data(), msa::DType::kInt32, {2, 6, 2});
  msa::AttentionShape shape;
  shape.h_q = 2;
  shape.h_kv = 2;
  shape.topk = 2;
  msa::Options o;
  o.q_per_item = 64;
  const std::vector<std::uint8_t> flags = {0, 1, 0,   // head 0: queries 2, 3 routed
                                           1, 0, 0};  // head 1: queries 0, 1 routed
  const msa::K2qCsr plain = msa::build_k2q_csr(shape, batch, topk, o);
  const msa::K2qCsr routed = msa::build_k2q_csr_routed(shape, batch, topk, o, msa::TileRoute{2, flags.data()});
  ASSERT_EQ(routed.total_rows, 3);
  // split_counts [q, h]: routed rows 1, others as in the plain plan.
  const std::vector<std::int32_t> want_counts = {2, 1, 2, 1, 1, 2, 1, 1, 2, 2, 2, 2};
  EXPECT_EQ(plain.split_counts, (std::vector<std::int32_t>{2, 2, 2, 2, 2, 2, 1, 1, 2, 2, 2, 2}));
  EXPECT_EQ(routed.split_counts, want_counts);
  // Head 0 without queries 2, 3: block 0 <- {0, 4, 5}, block 1 <- {0, 1, 4}, block 2 <- {1, 5}.
  const std::vector<std::int32_t> row_ptr0(routed.row_ptr.begin(), routed.row_ptr.begin() + 4);
  EXPECT_EQ(row_ptr0, (std::vector<std::int32_t>{0, 3, 6, 8}));
  const std::vector<std::int32_t> q0(routed.q_indices.begin(), routed.q_indices.begin() + 12);
  EXPECT_EQ(q0, (std::vector<std::int32_t>{0, 4, 5, 0, 1, 4, 1, 5, -1, -1, -1, -1}));
  // Head 1 without queries 0, 1: block 0 <- {2, 4, 5}, block 1 <- {3, 5}, block 2 <- {2, 4}.
  const std::vector<std::int32_t> row_ptr1(routed.row_ptr.begin() + 4, routed.row_ptr.end());
  EXPECT_EQ(row_ptr1, (std::vector<std::int32_t>{0, 3, 5, 7}));
  // qsplit keeps each remaining query's slots: query 5 of head 1 has {0, 1}: slots 0 and 1.
  const std::vector<std::int32_t> qs1(routed.qsplit.begin() + 12, routed.qsplit.begin() + 19);
  EXPECT_EQ(qs1, (std::vector<std::int32_t>{2, 4, 5, 3, 5 | 1 << 24, 2 | 1 << 24, 4 | 1 << 24}));
  std::size_t edges = 0;
  for (const msa::WorkItem& w : routed.work) edges += static_cast<std::size_t>(w.q_count);
  EXPECT_EQ(edges, 15u);
}

}  // namespace

// The tile-union kernel's order (tile_of_rank) visits every tile once, each head's tiles from
// the last query tile down, the heads interleaved.
TEST(TileRoute, RankOrderIsAPermutationHeaviestFirst) {
  for (const int h_kv : {1, 3, 4}) {
    for (const std::int64_t per_head : {1, 2, 7, 256}) {
      std::vector<int> seen(static_cast<std::size_t>(per_head * h_kv), 0);
      for (std::int64_t r = 0; r < per_head * h_kv; ++r) {
        const std::int64_t t = msa::tile_of_rank(r, per_head, h_kv);
        ASSERT_GE(t, 0);
        ASSERT_LT(t, per_head * h_kv);
        ++seen[static_cast<std::size_t>(t)];
        EXPECT_EQ(t / per_head, r % h_kv) << "head of rank " << r;
        EXPECT_EQ(t % per_head, per_head - 1 - r / h_kv) << "tile of rank " << r;
      }
      for (const int s : seen) EXPECT_EQ(s, 1);
    }
  }
}

// The grouped order: a permutation; the groups' ranks one after another, each group's tiles
// heaviest first over its own heads (the last group may hold fewer), tile_of_rank itself with
// one group. And the group size: no groups while the K/V fits twice the L2, then the heads
// whose K/V fits half of it, at least two rounds of tiles.
TEST(TileRoute, GroupedRankOrderIsAPermutationHeaviestFirstPerGroup) {
  for (const int h_kv : {1, 3, 8, 64}) {
    for (const int group_heads : {1, 2, 3, 5, 64, 0}) {
      for (const std::int64_t per_head : {1, 2, 7, 64}) {
        std::vector<int> seen(static_cast<std::size_t>(per_head * h_kv), 0);
        const int g = group_heads <= 0 || group_heads > h_kv ? h_kv : group_heads;
        for (std::int64_t r = 0; r < per_head * h_kv; ++r) {
          const std::int64_t t = msa::tile_of_rank_grouped(r, per_head, h_kv, group_heads);
          ASSERT_GE(t, 0);
          ASSERT_LT(t, per_head * h_kv);
          ++seen[static_cast<std::size_t>(t)];
          const std::int64_t group = r / (per_head * g), first = group * g;
          const std::int64_t heads = std::min<std::int64_t>(g, h_kv - first), rr = r - group * per_head * g;
          EXPECT_EQ(t / per_head, first + rr % heads) << "head of rank " << r;
          EXPECT_EQ(t % per_head, per_head - 1 - rr / heads) << "tile of rank " << r;
          if (g == h_kv) {
            EXPECT_EQ(t, msa::tile_of_rank(r, per_head, h_kv));
          }
        }
        for (const int n : seen) EXPECT_EQ(n, 1);
      }
    }
  }
  const std::int64_t l2 = 50 << 20;
  EXPECT_EQ(msa::union_group_heads(std::int64_t(2048) * 512, 16, 64, 132, l2), 64);  // 64 MB of K/V
  EXPECT_EQ(msa::union_group_heads(std::int64_t(8192) * 512, 64, 64, 132, l2), 6);   // 4 MB a head
  EXPECT_EQ(msa::union_group_heads(std::int64_t(16384) * 512, 128, 64, 132, l2), 3);
  EXPECT_EQ(msa::union_group_heads(std::int64_t(16384) * 512, 16, 64, 132, l2), 17);  // two rounds
  EXPECT_EQ(msa::union_group_heads(std::int64_t(1) << 40, 1, 4, 132, l2), 4);
  EXPECT_EQ(msa::union_group_heads(std::int64_t(1) << 30, 1000, 1, 132, l2), 1);
}

// The block-major kernel's K/V go EVICT_FIRST only where the call's K/V and its partials each
// fit the L2 (h_q 64, h_kv 4, d 128, top-16, 16-bit: 512 bytes of K/V a token and KV head,
// 256 KB of partials a query).
TEST(TileRoute, BlockMajorKvOnceWhereKvAndPartialsFitTheL2) {
  const auto kv_bytes = [](std::int64_t tokens) { return static_cast<double>(tokens) * 4 * 128 * 2 * 2; };
  const auto partial_bytes = [](std::int64_t queries) { return 16.0 * static_cast<double>(queries) * 64 * 128 * 2; };
  for (const std::int64_t l2 : {std::int64_t(50) << 20, std::int64_t(60) << 20}) {
    EXPECT_TRUE(msa::block_major_kv_once(kv_bytes(16555), partial_bytes(171), l2));   // 32 MB, 43 MB
    EXPECT_FALSE(msa::block_major_kv_once(kv_bytes(65707), partial_bytes(171), l2));  // 128 MB of K/V
    EXPECT_FALSE(msa::block_major_kv_once(kv_bytes(16896), partial_bytes(512), l2));  // 128 MB of partials
    EXPECT_FALSE(msa::block_major_kv_once(kv_bytes(8192), partial_bytes(8192), l2));  // 2 GB of partials
  }
  // At the L2's size exactly, and one byte past it (each side alone).
  const std::int64_t l2 = std::int64_t(60) << 20;
  const auto l2d = static_cast<double>(l2);
  EXPECT_TRUE(msa::block_major_kv_once(l2d, l2d, l2));
  EXPECT_FALSE(msa::block_major_kv_once(l2d + 1, 0, l2));
  EXPECT_FALSE(msa::block_major_kv_once(0, l2d + 1, l2));
  EXPECT_FALSE(msa::block_major_kv_once(1e30, 0, l2));  // a device batch's bound past any int64
  EXPECT_FALSE(msa::block_major_kv_once(0, 0, 0));      // no L2 size known
}
