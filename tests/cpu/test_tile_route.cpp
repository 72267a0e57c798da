// The CPU twin of the planner's PrefillPath::kAuto routing on hand-computed batches (a tile
// spanning two requests, duplicates, -1, negative and out-of-range ids), the rule's cut, and
// the host k2q builder with a routing: routed rows have no edge and split count 1.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/k2q_host.h"
#include "core/tile_route.h"
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
  // Tiles of 4 queries: {q0..q3}: union {(0,0), (0,1), (0,2), (1,0), (1,1)} = 5 > 8 / 4:
  // block-major; {q4}: union 2 > 2 / 4: block-major.
  EXPECT_EQ(msa::route_tiles_host(topk.data(), cu.data(), k_len.data(), 2, 1, 5, 3, 4),
            (std::vector<std::uint8_t>{0, 0}));
  // The same queries choosing alike: q0..q2 all {0, 1, 2}, q3 and q4 {0, 1}: tile 0 has
  // union 5 (requests differ) over 3 * 3 + 2 = 11 edges: still block-major; tiles of 2:
  // {q0, q1} union 3 over 6 edges: block-major; with 12 queries of one request it routes.
  const std::vector<std::int32_t> alike = {0, 1, 2, 2, 1, 0, 0, 2, 1, 0, 1, -1, 1, 0, -1};
  EXPECT_EQ(msa::route_tiles_host(alike.data(), cu.data(), k_len.data(), 2, 1, 5, 3, 4),
            (std::vector<std::uint8_t>{0, 0}));
  const std::vector<std::int32_t> cu12 = {0, 12}, k_len12 = {300};
  std::vector<std::int32_t> shared;
  for (int q = 0; q < 12; ++q) shared.insert(shared.end(), {2, 0, 1});
  // Tiles of 4: union 3 over 12 edges (a quarter: routed); tiles of 2: 3 over 6 (not).
  EXPECT_EQ(msa::route_tiles_host(shared.data(), cu12.data(), k_len12.data(), 1, 1, 12, 3, 4),
            (std::vector<std::uint8_t>{1, 1, 1}));
  EXPECT_EQ(msa::route_tiles_host(shared.data(), cu12.data(), k_len12.data(), 1, 1, 12, 3, 2),
            (std::vector<std::uint8_t>(6, 0)));
}

TEST(TileRoute, Threshold) {
  EXPECT_TRUE(msa::union_path_wins(16, 128));  // tile-shared: one union for 8 queries x 16 blocks
  EXPECT_TRUE(msa::union_path_wins(1, 4));
  EXPECT_FALSE(msa::union_path_wins(2, 7));
  EXPECT_FALSE(msa::union_path_wins(110, 128));  // random selections at 32k
  EXPECT_TRUE(msa::union_path_wins(0, 0));       // nothing selected: either path writes zeros
}

// union_only_batch by hand: tiles of 8 queries, topk 16, so a tile's union may reach
// 8 * 16 / 4 = 32 blocks (4096 tokens).
TEST(TileRoute, UnionOnlyBatchByHand) {
  using msa::union_only_batch;
  // The batch on the device: each request a tile may hold counts ceil(max_k_len / 128).
  EXPECT_TRUE(union_only_batch(nullptr, nullptr, 1, 4096, 16, 8));
  EXPECT_FALSE(union_only_batch(nullptr, nullptr, 1, 4097, 16, 8));
  EXPECT_TRUE(union_only_batch(nullptr, nullptr, 2, 2048, 16, 8));   // 2 * 16
  EXPECT_FALSE(union_only_batch(nullptr, nullptr, 2, 2049, 16, 8));  // 2 * 17
  EXPECT_TRUE(union_only_batch(nullptr, nullptr, 300, 512, 16, 8));  // at most 8 requests * 4
  EXPECT_FALSE(union_only_batch(nullptr, nullptr, 300, 513, 16, 8));
  EXPECT_FALSE(union_only_batch(nullptr, nullptr, 0, 0, 16, 8));
  EXPECT_FALSE(union_only_batch(nullptr, nullptr, 1, 100, 1, 2));  // cap 2 * 1 / 4 = 0 blocks
  // One request of 1000 queries on 4096 tokens: every tile sees at most 32 blocks.
  const std::vector<std::int32_t> cu1 = {0, 1000}, k1 = {4096};
  EXPECT_TRUE(union_only_batch(cu1.data(), k1.data(), 1, 4096, 16, 8));
  // Two requests share tile 0 (queries 0-4 and 5-7): 32 + 32 blocks on 4096-token requests.
  const std::vector<std::int32_t> cu2 = {0, 5, 13};
  const std::vector<std::int32_t> k_long = {4096, 4096}, k_short = {2048, 2048};
  EXPECT_FALSE(union_only_batch(cu2.data(), k_long.data(), 2, 4096, 16, 8));
  EXPECT_TRUE(union_only_batch(cu2.data(), k_short.data(), 2, 2048, 16, 8));  // 16 + 16
  // Eight one-query requests in one tile: each adds min(its blocks, 16).
  const std::vector<std::int32_t> cu8 = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<std::int32_t> k512(8, 512), k640(8, 640);
  EXPECT_TRUE(union_only_batch(cu8.data(), k512.data(), 8, 512, 16, 8));    // 8 * 4
  EXPECT_FALSE(union_only_batch(cu8.data(), k640.data(), 8, 640, 16, 8));   // 8 * 5
  // A fresh 4-token prefill (its last query sees block 0 only) beside the first 4 queries of a
  // 1000-query chunk on 4096 tokens (positions 3096-3099: 25 blocks): 1 + 25.
  const std::vector<std::int32_t> cu_f = {0, 4, 1004}, k_f = {4, 4096};
  EXPECT_TRUE(union_only_batch(cu_f.data(), k_f.data(), 2, 4096, 16, 8));
  // The same chunk's queries counted by what their last query sees: on 4100 tokens (33 blocks)
  // the bound on max_k_len already refuses.
  const std::vector<std::int32_t> k_g = {4, 4100};
  EXPECT_FALSE(union_only_batch(cu_f.data(), k_g.data(), 2, 4100, 16, 8));
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
