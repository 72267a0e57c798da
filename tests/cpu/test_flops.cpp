// The FLOP/byte model against hand-computed cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "bench/flops.h"
#include "bench/workload.h"

namespace {

using msa::bench::HostTensor;
using msa::bench::Request;

// [h_kv, total_q, topk] int32 from nested rows.
HostTensor topk_tensor(const std::vector<std::vector<std::vector<std::int32_t>>>& rows) {
  const auto h_kv = static_cast<std::int64_t>(rows.size());
  const auto total_q = static_cast<std::int64_t>(rows[0].size());
  const auto width = static_cast<std::int64_t>(rows[0][0].size());
  HostTensor t(msa::DType::kInt32, {h_kv, total_q, width});
  for (std::int64_t h = 0; h < h_kv; ++h)
    for (std::int64_t q = 0; q < total_q; ++q)
      std::copy(rows[h][q].begin(), rows[h][q].end(), t.data<std::int32_t>() + (h * total_q + q) * width);
  return t;
}

TEST(Flops, RowVisibleTokensCountsTheSetOfInRangeIds) {
  // k_len 300, pos 299: block 0 has 128 visible keys, block 2 has 256..299 = 44.
  const std::int32_t contract[] = {0, 2, -1, -1};
  EXPECT_EQ(msa::bench::row_visible_tokens(contract, 4, 299, 300), 172);
  // Duplicate 2 counts once; 7 is past ceil(300 / 128) = 3 blocks.
  const std::int32_t messy[] = {2, 0, 2, 7};
  EXPECT_EQ(msa::bench::row_visible_tokens(messy, 4, 299, 300), 172);
  const std::int32_t negatives[] = {-5, 1, 1, 1};
  EXPECT_EQ(msa::bench::row_visible_tokens(negatives, 4, 299, 300), 128);
  // A block above the query's position is in range but contributes no visible key.
  const std::int32_t future[] = {1, -1, -1, -1};
  EXPECT_EQ(msa::bench::row_visible_tokens(future, 4, 100, 300), 0);
}

// One request q_len 3, k_len 130: positions 127, 128, 129, two blocks; two KV heads.
struct SmallCase {
  std::vector<Request> requests{{3, 130}};
  HostTensor topk = topk_tensor({
      {{1, 0}, {0, 1}, {1, 0}},     // head 0: 0 + 128 | 128 + 1 | 128 + 2 visible keys
      {{0, -1}, {-1, -1}, {1, 9}},  // head 1: 128 | 0 | 2
  });
};

TEST(Flops, CountSelectionHandComputed) {
  SmallCase c;
  const auto s = msa::bench::count_selection(c.topk.view(), c.requests);
  EXPECT_EQ(s.rows, 6);
  EXPECT_EQ(s.edges, 8);  // block 1 of query 0 head 0 is an edge with no visible key
  EXPECT_EQ(s.visible_tokens, 128 + 129 + 130 + 128 + 0 + 2);
  EXPECT_EQ(s.kv_blocks, 4);  // both blocks on both heads
}

TEST(Flops, QueryMajorLayoutCountsTheSame) {
  SmallCase c;
  const HostTensor qm = msa::bench::query_major_topk(c.topk);  // [3, 2, 2] of [2, 3, 2]
  const auto a = msa::bench::count_selection(c.topk.view(), c.requests);
  const auto b = msa::bench::count_selection(qm.view(), c.requests, /*query_major=*/true);
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(a.edges, b.edges);
  EXPECT_EQ(a.visible_tokens, b.visible_tokens);
  EXPECT_EQ(a.kv_blocks, b.kv_blocks);
}

TEST(Flops, AttentionFlopsAndBytesHandComputed) {
  SmallCase c;
  msa::AttentionShape shape;
  shape.h_q = 4;
  shape.h_kv = 2;
  shape.d = 128;
  const auto s = msa::bench::count_selection(c.topk.view(), c.requests);
  EXPECT_DOUBLE_EQ(msa::bench::attention_flops(shape, s), 4.0 * 128 * 2 * 517);
  const auto b = msa::bench::prefill_bytes(shape, s, 3);
  EXPECT_DOUBLE_EQ(b.q_gather, 8 * 2 * 128 * 2);
  EXPECT_DOUBLE_EQ(b.partial_write, 8 * 2 * (128 * 2 + 4));
  EXPECT_DOUBLE_EQ(b.partial_read, b.partial_write);
  EXPECT_DOUBLE_EQ(b.kv, 4 * 2 * 128 * 128 * 2);
  EXPECT_DOUBLE_EQ(b.out, 3 * 4 * (128 * 2 + 4));
  EXPECT_DOUBLE_EQ(b.total(), 4096 + 4160 + 4160 + 262144 + 3120);
}

TEST(Flops, IndexerFlopsHandComputed) {
  // Keys seen: 128 + 129 + 130 (positions 127..129) and 300 (position 299).
  const std::vector<Request> requests{{3, 130}, {1, 300}, {0, 50}};
  EXPECT_DOUBLE_EQ(msa::bench::indexer_flops(2, 128, requests), 2.0 * 128 * 2 * 687);
}

TEST(Flops, ProducerContractRowsMatchTheTargetsFormula) {
  const std::vector<Request> requests{{200, 1000}, {1, 129}, {300, 300}, {0, 40}};
  const int h_kv = 2, width = 4;
  HostTensor topk;
  msa::bench::fill_topk(topk, requests, h_kv, width, msa::bench::Selection::kRandom, 0.0, 7);
  std::int64_t tokens = 0, edges = 0;
  for (const auto& r : requests)
    for (std::int64_t i = 0; i < r.q_len; ++i) {
      const std::int64_t pos = r.k_len - r.q_len + i;
      tokens += msa::bench::selected_tokens(pos, width);
      edges += std::min<std::int64_t>(width, pos / 128 + 1);
    }
  const auto s = msa::bench::count_selection(topk.view(), requests);
  EXPECT_EQ(s.visible_tokens, h_kv * tokens);
  EXPECT_EQ(s.edges, h_kv * edges);
}

TEST(Flops, FloorIsTheLargerOfComputeAndMemoryTime) {
  EXPECT_DOUBLE_EQ(msa::bench::floor_seconds(600e12, 1.45e12), 1.0);
  EXPECT_DOUBLE_EQ(msa::bench::floor_seconds(300e12, 2.9e12), 1.0);
  EXPECT_DOUBLE_EQ(msa::bench::floor_seconds(0, 0), 0.0);
}

TEST(Flops, RejectsATensorThatIsNotTopkRows) {
  HostTensor wrong(msa::DType::kFP32, {1, 3, 2});
  EXPECT_THROW(msa::bench::count_selection(wrong.view(), {{3, 130}}), msa::Error);
  HostTensor short_rows(msa::DType::kInt32, {1, 2, 2});
  EXPECT_THROW(msa::bench::count_selection(short_rows.view(), {{3, 130}}), msa::Error);
}

}  // namespace
