// The CUDA top-k against its CPU twin (cpu::topk_select through msa::TopK on the CPU backend),
// ids compared exactly, in both rankings (exact and MSA's quantised one): varlen batches with
// empty requests, rows of n <= k, rows of up to 7813 candidate blocks (1M tokens), k 1..32;
// ties, NaN, +-inf and signed zeros; normal, ascending, descending and all-equal rows; launches
// of enough rows to rank two per warp; strided scores; the query-major output layout; a CUDA
// graph replayed with new scores and lengths in the same buffers; strict mode's check of the
// batch values.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "bench/workload.h"
#include "msa/msa.h"
#include "tests/support/cuda_check.h"
#include "tests/support/cuda_graph.h"
#include "tests/support/device_tensor.h"

namespace {

using msa::DType;
using msa::bench::HostTensor;
using msa::test::DeviceTensor;

struct Request {
  int q_len, k_len;
};

struct Batch {
  HostTensor cu, k_len;
  std::int64_t total_q = 0, max_blocks = 0;
  explicit Batch(const std::vector<Request>& requests)
      : cu(DType::kInt32, {static_cast<std::int64_t>(requests.size()) + 1}),
        k_len(DType::kInt32, {static_cast<std::int64_t>(requests.size())}) {
    for (std::size_t b = 0; b < requests.size(); ++b) {
      total_q += requests[b].q_len;
      cu.data<std::int32_t>()[b + 1] = static_cast<std::int32_t>(total_q);
      k_len.data<std::int32_t>()[b] = requests[b].k_len;
      max_blocks = std::max<std::int64_t>(max_blocks, (requests[b].k_len + 127) / 128);
    }
  }
  msa::VarlenBatch view() const { return {cu.view(), k_len.view()}; }
};

enum class Fill { kMixed, kNormal, kAscending, kDescending, kEqual };

// Seven levels (ties) with -inf, NaN, +inf, -0 and +0 among them; randn rows (as an indexer's
// scores, distinct values); or ascending / descending / all-equal rows.
void fill_scores(HostTensor& s, Fill fill, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> level(-3, 3), special(0, 24);
  std::normal_distribution<float> normal(0.f, 2.f);
  const std::int64_t cols = s.shape()[2];
  for (std::int64_t i = 0; i < s.numel(); ++i) {
    const int sp = special(rng);
    float v = 0.25f * static_cast<float>(level(rng));
    if (sp == 0) v = -INFINITY;
    if (sp == 1) v = NAN;
    if (sp == 2) v = -0.f;
    if (sp == 3) v = 0.f;
    if (sp == 4 && seed % 2 == 0) v = INFINITY;
    if (fill == Fill::kNormal) v = normal(rng);
    if (fill == Fill::kAscending) v = static_cast<float>(i % cols);
    if (fill == Fill::kDescending) v = -static_cast<float>(i % cols);
    if (fill == Fill::kEqual) v = 1.f;
    s.set(i, v);
  }
}

std::vector<std::int32_t> ints(const HostTensor& t) {
  return std::vector<std::int32_t>(t.data<std::int32_t>(), t.data<std::int32_t>() + t.numel());
}

// CPU twin's ids for (scores, batch), [h, total_q, k].
HostTensor cpu_topk(const HostTensor& scores, msa::TensorView scores_view, const Batch& batch, int k,
                    msa::TopkRanking ranking = msa::TopkRanking::kExact) {
  HostTensor out(DType::kInt32, {scores.shape()[0], batch.total_q, k});
  msa::Options cpu;
  cpu.topk_ranking = ranking;
  msa::TopK op(k, cpu);
  op.plan(batch.view());
  op.run({scores_view, batch.view(), out.view()});
  return out;
}

msa::Options cuda_options(bool strict = false, msa::TopkRanking ranking = msa::TopkRanking::kExact) {
  msa::Options o;
  o.backend = msa::Backend::kCuda;
  o.strict = strict;
  o.topk_ranking = ranking;
  return o;
}

// One comparison: scores [h, total_q, pitch] viewed as [h, total_q, cols], the CUDA output
// head-major or query-major ([total_q, h, k] storage seen as [h, total_q, k]).
void check_case(const std::vector<Request>& requests, int h, int k, Fill fill, int extra_cols, int pitch_pad,
                bool query_major, std::uint64_t seed, msa::TopkRanking ranking = msa::TopkRanking::kExact) {
  const Batch batch(requests);
  const std::int64_t cols = batch.max_blocks + extra_cols, pitch = cols + pitch_pad;
  HostTensor scores(DType::kFP32, {h, batch.total_q, pitch});
  fill_scores(scores, fill, seed);
  msa::TensorView sv = scores.view();
  sv.shape[2] = cols;
  const HostTensor want = cpu_topk(scores, sv, batch, k, ranking);

  DeviceTensor d_scores(scores, sv), d_cu(batch.cu), d_k_len(batch.k_len);
  HostTensor got(DType::kInt32, query_major ? std::vector<std::int64_t>{batch.total_q, h, k}
                                            : std::vector<std::int64_t>{h, batch.total_q, k});
  DeviceTensor d_out(got);
  d_out.poison(got);
  msa::TensorView ov = d_out.view;
  if (query_major) {
    ov.shape[0] = h;
    ov.shape[1] = batch.total_q;
    ov.stride[0] = k;
    ov.stride[1] = std::int64_t{h} * k;
  }
  msa::TopK op(k, cuda_options(false, ranking));
  op.plan({d_cu.view, d_k_len.view});
  op.run({d_scores.view, {d_cu.view, d_k_len.view}, ov});
  CUDA_OK(cudaDeviceSynchronize());
  d_out.download(got);
  for (std::int64_t g = 0; g < h; ++g)
    for (std::int64_t r = 0; r < batch.total_q; ++r)
      for (int s = 0; s < k; ++s) {
        const std::int32_t w = want.data<std::int32_t>()[(g * batch.total_q + r) * k + s];
        const std::int32_t o = got.data<std::int32_t>()[query_major ? (r * h + g) * k + s : (g * batch.total_q + r) * k + s];
        ASSERT_EQ(o, w) << "head " << g << " row " << r << " slot " << s << " (k " << k << ")";
      }
}

const std::vector<Request> kMixedBatch = {{40, 5000}, {3, 3}, {0, 90}, {130, 1100}, {2, 2049}, {64, 200000}, {5, 130}};

TEST(TopkCuda, MatchesCpuTwinOnTiesNanInfAndSignedZeros) {
  MSA_SKIP_WITHOUT_GPU();
  for (const int k : {1, 2, 5, 8, 9, 16, 17, 31, 32}) {
    SCOPED_TRACE(testing::Message() << "k " << k);
    check_case(kMixedBatch, 2, k, Fill::kMixed, 0, 0, false, 100 + k);
    if (HasFatalFailure()) return;
  }
}

TEST(TopkCuda, RowsOfOneMillionTokens) {
  MSA_SKIP_WITHOUT_GPU();
  const std::vector<Request> requests = {{6, 1000000}, {1, 999999}};
  for (const int k : {16, 32}) {
    check_case(requests, 3, k, Fill::kMixed, 0, 0, false, 7 + k);
    if (HasFatalFailure()) return;
  }
}

// Rows of 2048-2344 candidates (262k-300k tokens) beside short ones in one launch, head-major
// and query-major, K 16 and 25.
TEST(TopkCuda, LongAndShortRowsShareAWarp) {
  MSA_SKIP_WITHOUT_GPU();
  const std::vector<Request> requests = {{20, 300000}, {30, 1000}, {1, 5}, {20, 262144 + 129}, {7, 262144}};
  for (const int k : {16, 25}) {
    check_case(requests, 3, k, Fill::kMixed, 0, 0, false, 50 + k);
    check_case(requests, 2, k, Fill::kNormal, 3, 5, true, 60 + k);
    if (HasFatalFailure()) return;
  }
}

// Launches of 32769 rows (3 heads), where k <= 17 ranks two rows per warp (topk.cu's
// kHalfWarpRows): rows of 0-312 candidates and n <= K rows side by side in a warp, an odd row
// count (the last warp's second row is absent), both rankings, 16-byte and scalar loads (row
// pitches 316 and 317), the query-major layout.
TEST(TopkCuda, ManyRowsTwoPerWarp) {
  MSA_SKIP_WITHOUT_GPU();
  const std::vector<Request> requests = {{5000, 40000}, {3, 3}, {0, 90}, {4000, 7000}, {1, 5}, {1919, 33000}};
  for (const int k : {2, 16, 17}) {
    SCOPED_TRACE(testing::Message() << "k " << k);
    check_case(requests, 3, k, Fill::kMixed, 0, 3, false, 70 + k);
    check_case(requests, 3, k, Fill::kNormal, 1, 3, true, 80 + k);
    if (HasFatalFailure()) return;
  }
  check_case(requests, 3, 16, Fill::kNormal, 0, 3, false, 90, msa::TopkRanking::kQuantised16);
  check_case(requests, 3, 16, Fill::kEqual, 0, 3, false, 91);
}

TEST(TopkCuda, AscendingAndAllEqualRows) {
  MSA_SKIP_WITHOUT_GPU();
  check_case(kMixedBatch, 2, 16, Fill::kAscending, 0, 0, false, 1);
  check_case(kMixedBatch, 2, 32, Fill::kAscending, 0, 0, false, 2);
  check_case(kMixedBatch, 2, 16, Fill::kEqual, 0, 0, false, 3);
  check_case(kMixedBatch, 2, 3, Fill::kEqual, 0, 0, false, 4);
}

TEST(TopkCuda, NormalAndDescendingRows) {
  MSA_SKIP_WITHOUT_GPU();
  for (const int k : {2, 16, 32}) {
    check_case(kMixedBatch, 2, k, Fill::kNormal, 0, 0, false, 30 + k);
    check_case(kMixedBatch, 2, k, Fill::kDescending, 0, 0, false, 31 + k);
    if (HasFatalFailure()) return;
  }
}

TEST(TopkCuda, QuantisedRankingMatchesCpuTwin) {
  MSA_SKIP_WITHOUT_GPU();
  const auto q16 = msa::TopkRanking::kQuantised16;
  for (const int k : {1, 2, 9, 16, 32}) {
    SCOPED_TRACE(testing::Message() << "k " << k);
    check_case(kMixedBatch, 2, k, Fill::kNormal, 0, 0, false, 40 + k, q16);
    check_case(kMixedBatch, 2, k, Fill::kMixed, 0, 0, false, 50 + k, q16);  // odd and even seeds: +inf or not
    check_case(kMixedBatch, 2, k, Fill::kMixed, 0, 0, false, 51 + k, q16);
    if (HasFatalFailure()) return;
  }
  check_case(kMixedBatch, 2, 16, Fill::kEqual, 0, 0, false, 60, q16);
  check_case(kMixedBatch, 2, 16, Fill::kAscending, 0, 0, false, 61, q16);
  check_case(kMixedBatch, 3, 16, Fill::kNormal, 5, 3, true, 62, q16);  // strided scores, query-major
  check_case({{6, 1000000}, {1, 999999}}, 2, 16, Fill::kNormal, 0, 0, false, 63, q16);
}

TEST(TopkCuda, StridedScoresWiderRowsAndQueryMajorOutput) {
  MSA_SKIP_WITHOUT_GPU();
  check_case(kMixedBatch, 4, 16, Fill::kMixed, 5, 3, false, 11);
  check_case(kMixedBatch, 4, 16, Fill::kMixed, 0, 0, true, 12);
  check_case(kMixedBatch, 1, 7, Fill::kMixed, 2, 1, true, 13);
}

// run() captured once, replayed after new scores and new lengths land in the same buffers.
TEST(TopkCuda, GraphReplaysNewScoresAndLengths) {
  MSA_SKIP_WITHOUT_GPU();
  const int h = 2, k = 16;
  Batch batch({{40, 5000}, {3, 300}, {17, 70000}});
  const std::int64_t cols = 600;  // covers the lengths of both steps
  HostTensor scores(DType::kFP32, {h, batch.total_q, cols});
  fill_scores(scores, Fill::kMixed, 21);
  DeviceTensor d_scores(scores), d_cu(batch.cu), d_k_len(batch.k_len);
  HostTensor got(DType::kInt32, {h, batch.total_q, k});
  DeviceTensor d_out(got);
  msa::TopK op(k, cuda_options());
  op.plan({d_cu.view, d_k_len.view});
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const msa::test::CapturedGraph graph(
      stream,
      [&](cudaStream_t s) {
        op.run({d_scores.view, {d_cu.view, d_k_len.view}, d_out.view}, s);
      },
      cudaStreamCaptureModeThreadLocal);
  ASSERT_TRUE(graph.ok());
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(testing::Message() << "step " << step);
    batch.k_len.data<std::int32_t>()[0] = 5000 + 1000 * step;
    batch.k_len.data<std::int32_t>()[2] = 70000 - 9000 * step;
    fill_scores(scores, Fill::kMixed, 22 + step);
    d_scores.upload(scores);
    d_k_len.upload(batch.k_len);
    d_out.poison(got);
    CUDA_OK(graph.launch(stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    d_out.download(got);
    EXPECT_EQ(ints(got), ints(cpu_topk(scores, scores.view(), batch, k)));
  }
  CUDA_OK(cudaStreamDestroy(stream));
}

TEST(TopkCuda, StrictModeChecksTheBatchValues) {
  MSA_SKIP_WITHOUT_GPU();
  Batch batch({{40, 5000}, {3, 2}});  // q_len 3 > k_len 2
  HostTensor scores(DType::kFP32, {1, batch.total_q, 40});
  fill_scores(scores, Fill::kMixed, 5);
  DeviceTensor d_scores(scores), d_cu(batch.cu), d_k_len(batch.k_len);
  HostTensor got(DType::kInt32, {1, batch.total_q, 4});
  DeviceTensor d_out(got);
  d_out.poison(got);
  msa::TopK op(4, cuda_options(/*strict=*/true));
  try {
    op.run({d_scores.view, {d_cu.view, d_k_len.view}, d_out.view});
    FAIL() << "no msa::Error";
  } catch (const msa::Error& e) {
    EXPECT_NE(std::string(e.what()).find("k_len"), std::string::npos) << e.what();
  }
  // Nothing was written: the output still holds its poison.
  HostTensor after(DType::kInt32, {1, batch.total_q, 4});
  d_out.download(after);
  for (std::int64_t i = 0; i < after.numel(); ++i) ASSERT_EQ(after.data<std::uint32_t>()[i], 0xffffffffu);
}

TEST(TopkCuda, EmptyBatchRowsAndShapeErrors) {
  MSA_SKIP_WITHOUT_GPU();
  Batch batch({{0, 10}, {0, 0}});
  HostTensor scores(DType::kFP32, {2, 0, 1});
  DeviceTensor d_scores(scores), d_cu(batch.cu), d_k_len(batch.k_len);
  HostTensor got(DType::kInt32, {2, 0, 8});
  DeviceTensor d_out(got);
  msa::TopK op(8, cuda_options());
  op.run({d_scores.view, {d_cu.view, d_k_len.view}, d_out.view});  // no rows: no launch
  CUDA_OK(cudaDeviceSynchronize());
  // Strict mode reads the device batch and scores on the host: empty scores are no error.
  msa::TopK strict(8, cuda_options(/*strict=*/true));
  EXPECT_NO_THROW(strict.run({d_scores.view, {d_cu.view, d_k_len.view}, d_out.view}));
  CUDA_OK(cudaDeviceSynchronize());
  // A host scores tensor on the CUDA backend is named.
  try {
    op.run({scores.view(), {d_cu.view, d_k_len.view}, d_out.view});
    FAIL() << "no msa::Error";
  } catch (const msa::Error& e) {
    EXPECT_NE(std::string(e.what()).find("scores"), std::string::npos) << e.what();
  }
}

}  // namespace
