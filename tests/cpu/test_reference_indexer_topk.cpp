// Indexer scores (bf16, fp16, FP8 E4M3) against a brute force that walks keys in the outer loop; exact top-k against a
// full sort, ties and n <= K rows included; the quantised ranking against MSA's 32-bit key
// written out here, and on a row where the two rankings must disagree; the fused IndexerTopK's
// twin against the full sort over the indexer's scores, and its bound and argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bench/workload.h"
#include "msa/msa.h"
#include "tests/support/compare.h"
#include "tests/support/expect_error.h"

namespace {

using msa::DType;
using msa::bench::HostTensor;
using msa::bench::Request;
using msa::bench::Workload;
using msa::bench::WorkloadSpec;

constexpr float kPad = 5.f;  // the padding columns of the strided score view keep this value

void check_indexer(int page_size, DType dtype, std::uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "page " << page_size);
  WorkloadSpec spec;
  spec.shape.h_q = 4;
  spec.shape.h_kv = 2;
  spec.shape.topk = 8;
  spec.h_i = 2;
  spec.page_size = page_size;
  spec.dtype = dtype == DType::kFP8E4M3 ? DType::kBF16 : dtype;
  spec.seed = seed;
  spec.requests = {{70, 1000}, {0, 200}, {1, 1}, {30, 300}, {5, 133}};
  Workload w = msa::bench::make_workload(spec);
  if (dtype == DType::kFP8E4M3) {  // FP8 E4M3 index queries and keys, rounded from the bf16 ones
    for (HostTensor* t : {&w.index_q, &w.index_k}) {
      HostTensor e4m3(DType::kFP8E4M3, t->shape());
      for (std::int64_t i = 0; i < t->numel(); ++i) e4m3.set(i, t->get(i));
      *t = std::move(e4m3);
    }
  }
  const int h_i = spec.h_i, d = spec.shape.d;
  const std::int64_t cols = 10, pitch = cols + 3;  // >= ceil(1000 / 128) = 8 columns
  HostTensor storage(DType::kFP32, {h_i, w.total_q, pitch});
  storage.fill(kPad);
  msa::IndexerArgs a;
  a.index_q = w.index_q.view();
  a.index_k = w.index_kv();
  a.batch = w.batch();
  a.scores = msa::TensorView::strided(storage.raw(), DType::kFP32, {h_i, w.total_q, cols},
                                      {w.total_q * pitch, pitch, 1});
  const float scale = 0.3f;
  msa::Indexer op(h_i, d, scale, msa::Options{});
  op.plan(a.batch);
  op.run(a);

  // Brute force, key-major: every key updates the blocks' maxima of the queries that see it.
  HostTensor ref(DType::kFP32, {h_i, w.total_q, cols}), got(DType::kFP32, {h_i, w.total_q, cols});
  std::vector<double> best(static_cast<std::size_t>(h_i * w.total_q * cols), -INFINITY);
  std::int64_t row0 = 0;
  std::int64_t flat0 = 0;
  for (std::size_t b = 0; b < spec.requests.size(); ++b) {
    const Request& r = spec.requests[b];
    for (std::int64_t t = 0; t < r.k_len; ++t) {
      std::int64_t off;
      if (page_size > 0) {
        const std::int64_t page = w.page_table.data<std::int32_t>()[b * w.page_table.shape()[1] + t / page_size];
        off = (page * page_size + t % page_size) * d;
      } else {
        off = (flat0 + t) * d;
      }
      for (std::int64_t i = std::max<std::int64_t>(0, t - (r.k_len - r.q_len)); i < r.q_len; ++i)
        for (int h = 0; h < h_i; ++h) {
          double dot = 0.0;
          for (int j = d - 1; j >= 0; --j)
            dot += static_cast<double>(w.index_q.get(((row0 + i) * h_i + h) * d + j)) * w.index_k.get(off + j);
          double& slot = best[(h * w.total_q + row0 + i) * cols + t / 128];
          slot = std::max(slot, dot);
        }
    }
    row0 += r.q_len;
    flat0 += r.k_len;
  }
  for (std::int64_t i = 0; i < ref.numel(); ++i) ref.set(i, static_cast<float>(scale * best[i]));
  for (int h = 0; h < h_i; ++h)
    for (std::int64_t q = 0; q < w.total_q; ++q) {
      for (std::int64_t p = 0; p < cols; ++p)
        got.set((h * w.total_q + q) * cols + p, storage.get((h * w.total_q + q) * pitch + p));
      for (std::int64_t p = cols; p < pitch; ++p) ASSERT_EQ(storage.get((h * w.total_q + q) * pitch + p), kPad);
    }
  EXPECT_TRUE(msa::test::close(got, ref, {2e-4, 2e-4, 0.9999}));
}

TEST(ReferenceIndexer, MatchesKeyMajorBruteForce) {
  check_indexer(32, DType::kBF16, 201);
  check_indexer(128, DType::kFP16, 202);
  check_indexer(0, DType::kBF16, 203);
  check_indexer(64, DType::kFP8E4M3, 204);
}

// The top-k rule as a full sort: (NaN last, score descending, id ascending).
std::vector<std::int32_t> brute_topk(const float* scores, std::int64_t local, int k) {
  std::vector<std::int32_t> row(static_cast<std::size_t>(k), -1);
  if (local + 1 <= k) {
    for (std::int32_t p = 0; p <= local; ++p) row[p] = p;
    return row;
  }
  std::vector<std::tuple<int, double, std::int32_t>> keys;
  for (std::int32_t p = 0; p < local; ++p) {
    const bool nan = std::isnan(scores[p]);
    keys.emplace_back(nan ? 1 : 0, nan ? 0.0 : -static_cast<double>(scores[p]), p);
  }
  std::sort(keys.begin(), keys.end());
  for (int s = 0; s < k - 1; ++s) row[s] = std::get<2>(keys[s]);
  row[k - 1] = static_cast<std::int32_t>(local);
  return row;
}

TEST(ReferenceTopk, MatchesFullSortWithTies) {
  const std::vector<Request> requests = {{40, 5000}, {3, 3}, {0, 90}, {130, 1100}, {2, 2049}};
  std::vector<std::int32_t> cu = {0}, kl;
  for (const auto& r : requests) {
    cu.push_back(cu.back() + r.q_len);
    kl.push_back(r.k_len);
  }
  const std::int64_t total_q = cu.back(), cols = 40, h = 2;
  msa::VarlenBatch batch{msa::TensorView::contiguous(cu.data(), DType::kInt32, {static_cast<std::int64_t>(cu.size())}),
                         msa::TensorView::contiguous(kl.data(), DType::kInt32, {static_cast<std::int64_t>(kl.size())})};
  HostTensor scores(DType::kFP32, {h, total_q, cols});
  std::mt19937_64 rng(301);
  std::uniform_int_distribution<int> level(-3, 3);
  std::uniform_int_distribution<int> special(0, 19);
  // Seven score levels make ties frequent; a few -inf and NaN scores on top.
  for (std::int64_t i = 0; i < scores.numel(); ++i) {
    const int s = special(rng);
    scores.set(i, s == 0 ? -INFINITY : s == 1 ? NAN : 0.5f * static_cast<float>(level(rng)));
  }
  for (const int k : {1, 8, 16}) {
    SCOPED_TRACE(testing::Message() << "topk " << k);
    HostTensor out(DType::kInt32, {h, total_q, k});
    out.fill(-99.f);
    msa::TopK op(k, msa::Options{});
    op.plan(batch);
    op.run({scores.view(), batch, out.view()});
    std::int64_t rows_over_k = 0;
    for (std::size_t b = 0; b < requests.size(); ++b)
      for (std::int64_t i = 0; i < requests[b].q_len; ++i) {
        const std::int64_t r = cu[b] + i;
        const std::int64_t local = (requests[b].k_len - requests[b].q_len + i) / 128;
        rows_over_k += local + 1 > k;
        for (std::int64_t g = 0; g < h; ++g) {
          const auto want = brute_topk(scores.data<float>() + (g * total_q + r) * cols, local, k);
          const std::int32_t* got = out.data<std::int32_t>() + (g * total_q + r) * k;
          ASSERT_EQ(std::vector<std::int32_t>(got, got + k), want) << "head " << g << " row " << r;
        }
      }
    EXPECT_GT(rows_over_k, 0);
  }
}

// MSA's quantised top-k as its kernel spells it: per row, scale and bias from the ranked
// scores' min and max, key = (level << 16) | (~id & 0xFFFF), the largest keys first.
std::vector<std::int32_t> msa_quantised_topk(const float* scores, std::int64_t local, int k) {
  std::vector<std::int32_t> row(static_cast<std::size_t>(k), -1);
  if (local + 1 <= k) {
    for (std::int64_t s = 0; s <= local; ++s) row[s] = static_cast<std::int32_t>(s);
    return row;
  }
  const float lo = *std::min_element(scores, scores + local), hi = *std::max_element(scores, scores + local);
  const float scale = hi > lo ? 65534.0f / (hi - lo) : 0.0f;
  const float bias = std::fma(-lo, scale, 1.5f);
  std::vector<std::uint32_t> keys;
  for (std::int64_t p = 0; p < local; ++p) {
    const float x = std::fma(scores[p], scale, bias);
    std::uint32_t q = x <= 0.f ? 0u : x >= 4294967295.f ? 4294967295u : static_cast<std::uint32_t>(x);
    q = q > 65535u ? 65535u : q;
    keys.push_back((q << 16) | (~static_cast<std::uint32_t>(p) & 0xFFFFu));
  }
  std::sort(keys.begin(), keys.end(), std::greater<>());
  for (int s = 0; s < k - 1; ++s) row[s] = static_cast<std::int32_t>(~keys[s] & 0xFFFFu);
  row[k - 1] = static_cast<std::int32_t>(local);
  return row;
}

msa::Options quantised_ranking() {
  msa::Options o;
  o.topk_ranking = msa::TopkRanking::kQuantised16;
  return o;
}

TEST(ReferenceTopk, QuantisedRankingMatchesMsaKey) {
  // Finite rows: randn scores, and rows of few distinct values spread over a wide range so that
  // several land on one level.
  const std::vector<Request> requests = {{50, 9000}, {3, 3}, {0, 90}, {130, 1100}, {7, 300000}};
  std::vector<std::int32_t> cu = {0}, kl;
  for (const auto& r : requests) {
    cu.push_back(cu.back() + r.q_len);
    kl.push_back(r.k_len);
  }
  const std::int64_t total_q = cu.back(), h = 2;
  std::int64_t cols = 0;
  for (const auto& r : requests) cols = std::max<std::int64_t>(cols, (r.k_len + 127) / 128);
  msa::VarlenBatch batch{msa::TensorView::contiguous(cu.data(), DType::kInt32, {static_cast<std::int64_t>(cu.size())}),
                         msa::TensorView::contiguous(kl.data(), DType::kInt32, {static_cast<std::int64_t>(kl.size())})};
  HostTensor scores(DType::kFP32, {h, total_q, cols});
  std::mt19937_64 rng(77);
  std::normal_distribution<float> normal(0.f, 3.f);
  std::uniform_int_distribution<int> coarse(0, 40);
  for (std::int64_t i = 0; i < scores.numel(); ++i)
    scores.set(i, (i / cols) % 3 == 0 ? 1e4f * static_cast<float>(coarse(rng)) + 0.3f * normal(rng) : normal(rng));
  for (const int k : {1, 2, 16, 32}) {
    SCOPED_TRACE(testing::Message() << "topk " << k);
    HostTensor out(DType::kInt32, {h, total_q, k});
    msa::TopK op(k, quantised_ranking());
    op.plan(batch);
    op.run({scores.view(), batch, out.view()});
    std::int64_t differs = 0;  // rows where the quantisation changes the selection
    HostTensor exact(DType::kInt32, {h, total_q, k});
    msa::TopK exact_op(k, msa::Options{});
    exact_op.run({scores.view(), batch, exact.view()});
    for (std::size_t b = 0; b < requests.size(); ++b)
      for (std::int64_t i = 0; i < requests[b].q_len; ++i) {
        const std::int64_t r = cu[b] + i;
        const std::int64_t local = (requests[b].k_len - requests[b].q_len + i) / 128;
        for (std::int64_t g = 0; g < h; ++g) {
          const auto want = msa_quantised_topk(scores.data<float>() + (g * total_q + r) * cols, local, k);
          const std::int32_t* got = out.data<std::int32_t>() + (g * total_q + r) * k;
          ASSERT_EQ(std::vector<std::int32_t>(got, got + k), want) << "head " << g << " row " << r;
          const std::int32_t* ex = exact.data<std::int32_t>() + (g * total_q + r) * k;
          differs += !std::equal(got, got + k, ex);
        }
      }
    if (k > 1) {
      EXPECT_GT(differs, 0);  // the coarse rows tie on levels the exact ranking splits
    }
  }
}

TEST(ReferenceTopk, QuantisedTiesGoToTheSmallerIdWhereExactSplitsThem) {
  // One query at position 600 (local block 4), candidates 0..3: 1.0 and 1.0 + 2^-20 share the
  // top level 65535, so the quantised ranking takes block 1 and the exact one block 2.
  std::vector<std::int32_t> cu = {0, 1}, kl = {601};
  const msa::VarlenBatch batch{msa::TensorView::contiguous(cu.data(), DType::kInt32, {2}),
                               msa::TensorView::contiguous(kl.data(), DType::kInt32, {1})};
  HostTensor scores(DType::kFP32, {1, 1, 5});
  const float row[5] = {0.f, 1.f, 1.f + 0x1p-20f, 0.5f, 9.f};  // block 4 is the local one: never ranked
  for (int i = 0; i < 5; ++i) scores.set(i, row[i]);
  for (const auto& [options, best] : {std::pair{msa::Options{}, 2}, std::pair{quantised_ranking(), 1}}) {
    HostTensor out(DType::kInt32, {1, 1, 3});
    msa::TopK op(3, options);
    op.run({scores.view(), batch, out.view()});
    EXPECT_EQ(out.data<std::int32_t>()[0], best);
    EXPECT_EQ(out.data<std::int32_t>()[1], best == 2 ? 1 : 2);
    EXPECT_EQ(out.data<std::int32_t>()[2], 4);
  }
}

TEST(ReferenceTopk, QuantisedRankingPutsNonFiniteScoresAtTheEnds) {
  // -inf and NaN take level 0 (ranked by id among themselves), +inf level 65535 (tied with the
  // finite maximum, so the smaller id goes first); the range comes from the finite scores alone.
  std::vector<std::int32_t> cu = {0, 1}, kl = {1000};  // local block 7, candidates 0..6
  const msa::VarlenBatch batch{msa::TensorView::contiguous(cu.data(), DType::kInt32, {2}),
                               msa::TensorView::contiguous(kl.data(), DType::kInt32, {1})};
  HostTensor scores(DType::kFP32, {1, 1, 8});
  const float row[8] = {NAN, -INFINITY, 2.f, INFINITY, -1.f, NAN, 0.5f, 0.f};
  for (int i = 0; i < 8; ++i) scores.set(i, row[i]);
  HostTensor out(DType::kInt32, {1, 1, 7});
  msa::TopK op(7, quantised_ranking());
  op.run({scores.view(), batch, out.view()});
  const std::vector<std::int32_t> want = {2, 3, 6, 4, 0, 1, 7};
  EXPECT_EQ(std::vector<std::int32_t>(out.data<std::int32_t>(), out.data<std::int32_t>() + 7), want);
}

// IndexerTopK on the CPU: every row's ids as the full sort picks them from Indexer's scores, the
// k_len bound checked by name, and the construction errors.
TEST(ReferenceIndexerTopk, TwinIsTheSortOverIndexerScores) {
  WorkloadSpec spec;
  spec.shape.h_q = 4;
  spec.shape.h_kv = 2;
  spec.shape.topk = 8;
  spec.h_i = 3;
  spec.page_size = 32;
  spec.seed = 401;
  spec.requests = {{70, 3000}, {0, 200}, {1, 1}, {30, 1300}, {5, 133}};
  const Workload w = msa::bench::make_workload(spec);
  const std::int64_t max_k_len = 3300, cols = 26;  // ceil(3300 / 128)
  HostTensor scores(DType::kFP32, {spec.h_i, w.total_q, cols});
  msa::Indexer indexer(spec.h_i, 128);
  indexer.run({w.index_q.view(), w.index_kv(), w.batch(), scores.view()});
  EXPECT_EQ(msa::IndexerTopK::workspace_bytes(spec.h_i, 16, {5, w.total_q, max_k_len}), 0u);
  for (const int k : {1, 7, 16}) {
    SCOPED_TRACE(testing::Message() << "topk " << k);
    HostTensor out(DType::kInt32, {spec.h_i, w.total_q, k});
    out.fill(-99.f);
    msa::IndexerTopK op(spec.h_i, 128, k);
    op.plan({5, w.total_q, max_k_len});
    op.run({w.index_q.view(), w.index_kv(), w.batch(), out.view()});
    std::int64_t ranked = 0;
    for (std::size_t b = 0; b < spec.requests.size(); ++b)
      for (std::int64_t i = 0; i < spec.requests[b].q_len; ++i) {
        const std::int64_t r = w.batch().cu_seqlens_q.ptr<const std::int32_t>()[b] + i;
        const std::int64_t local = (spec.requests[b].k_len - spec.requests[b].q_len + i) / 128;
        ranked += local + 1 > k;
        for (std::int64_t g = 0; g < spec.h_i; ++g) {
          const auto want = brute_topk(scores.data<float>() + (g * w.total_q + r) * cols, local, k);
          const std::int32_t* got = out.data<std::int32_t>() + (g * w.total_q + r) * k;
          ASSERT_EQ(std::vector<std::int32_t>(got, got + k), want) << "head " << g << " row " << r;
        }
      }
    EXPECT_GT(ranked, 0);
  }
  HostTensor out(DType::kInt32, {spec.h_i, w.total_q, 16});
  out.fill(-99.f);
  msa::IndexerTopK op(spec.h_i, 128, 16);
  const msa::IndexerTopkArgs args{w.index_q.view(), w.index_kv(), w.batch(), out.view()};
  msa::test::expect_error_mentioning([&] { op.run(args); }, "plan");
  op.plan({5, w.total_q, 2999});  // request 0 has 3000 tokens
  msa::test::expect_error_mentioning([&] { op.run(args); }, "k_len[0]");
  op.plan({4, w.total_q, 3000});
  msa::test::expect_error_mentioning([&] { op.run(args); }, "k_len.shape[0]");
  for (std::int64_t i = 0; i < out.numel(); ++i) ASSERT_EQ(out.data<std::int32_t>()[i], -99) << "written at " << i;
  msa::Options quantised;
  quantised.topk_ranking = msa::TopkRanking::kQuantised16;
  msa::test::expect_error_mentioning([&] { msa::IndexerTopK bad(4, 128, 16, 0.f, quantised); },
                                     "options.topk_ranking");
  msa::test::expect_error_mentioning([&] { msa::IndexerTopK bad(4, 128, 0); }, "topk");
  msa::test::expect_error_mentioning([&] { msa::IndexerTopK bad(4, 64, 16); }, "d");
}

}  // namespace
