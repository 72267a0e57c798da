// The CPU twin of the planner's PrefillPath::kAuto counts on a hand-computed batch: a tile
// spanning two requests, duplicates, -1, negative and out-of-range ids.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/union_stats.h"

namespace {

TEST(UnionStats, CountsTileUnionsAndEdgesByHand) {
  // Request 0: 3 queries, k_len 300 (blocks 0..2); request 1: 2 queries, k_len 130 (0..1).
  const std::vector<std::int32_t> cu = {0, 3, 5}, k_len = {300, 130};
  const std::vector<std::int32_t> topk = {
      0, 0, -1,  // q0: {0}        -> 1 edge
      1, 2, 5,   // q1: {1, 2}     -> 2 (5 is past request 0's blocks)
      2, 1, 0,   // q2: {0, 1, 2}  -> 3
      0, 1, 1,   // q3 (request 1): {0, 1} -> 2
      1, -7, 0,  // q4 (request 1): {0, 1} -> 2
  };
  // Tiles of 4 queries: {q0..q3} has union {(0,0), (0,1), (0,2), (1,0), (1,1)}; {q4} has 2.
  const msa::UnionStats s = msa::union_stats_host(topk.data(), cu.data(), k_len.data(), 2, 1, 5, 3, 4);
  EXPECT_EQ(s.union_blocks, 7u);
  EXPECT_EQ(s.edges, 10u);
  // One tile per query: every query's union is its own selection.
  const msa::UnionStats single = msa::union_stats_host(topk.data(), cu.data(), k_len.data(), 2, 1, 5, 3, 1);
  EXPECT_EQ(single.union_blocks, 10u);
  EXPECT_EQ(single.edges, 10u);
}

TEST(UnionStats, PathChoiceThreshold) {
  EXPECT_TRUE(msa::union_path_wins(16, 128));  // tile-shared: one union for 8 queries x 16 blocks
  EXPECT_TRUE(msa::union_path_wins(1, 4));
  EXPECT_FALSE(msa::union_path_wins(2, 7));
  EXPECT_FALSE(msa::union_path_wins(110, 128));  // random selections at 32k
  EXPECT_TRUE(msa::union_path_wins(0, 0));       // nothing selected: either path writes zeros
}

}  // namespace
