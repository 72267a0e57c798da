// Indexer scores against a brute force that walks keys in the outer loop, and exact top-k
// against a full sort, ties and n <= K rows included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "bench/workload.h"
#include "msa/msa.h"
#include "tests/support/compare.h"

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
  spec.dtype = dtype;
  spec.seed = seed;
  spec.requests = {{70, 1000}, {0, 200}, {1, 1}, {30, 300}, {5, 133}};
  const Workload w = msa::bench::make_workload(spec);
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

}  // namespace
