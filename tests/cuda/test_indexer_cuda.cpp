// The CUDA prefill indexer against its CPU twin (msa::Indexer on the CPU backend), scores within
// spec §7's 2e-4 * max(1, |ref|) and -inf in the same places: varlen chunked batches with empty
// and one-token requests, lengths off the block and page grid, page sizes 16-128 and flat
// caches, NaN in the stale cache slots past k_len, h_i 1..16 (3: tiles of 85 queries), fp16,
// padded score rows and index-query strides, the decode form, rows of 6000 tokens; bitwise
// reproducibility, a CUDA graph replayed with new lengths and queries, invisible tokens on
// out-of-range pages, and strict mode's page-table check before anything is written.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "bench/workload.h"
#include "msa/msa.h"
#include "tests/support/compare.h"
#include "tests/support/cuda_cases.h"
#include "tests/support/cuda_check.h"
#include "tests/support/device_tensor.h"

namespace {

using msa::DType;
using msa::bench::HostTensor;
using msa::bench::Request;
using msa::bench::Workload;
using msa::bench::WorkloadSpec;
using msa::test::DeviceTensor;

constexpr msa::bench::Tolerance kScoreTolerance{2e-4, 2e-4, 0.9999};

struct Case {
  std::vector<Request> requests;
  int h_i = 4;
  int page_size = 64;  // 0: flat
  DType dtype = DType::kBF16;
  int extra_cols = 0;  // score columns past ceil(max k_len / 128)
  int pitch_pad = 0;   // padding after each score row
  int head_pad = 0;    // index_q head stride d + head_pad
  std::uint64_t seed = 1;
};

Workload make(const Case& c) {
  WorkloadSpec spec;
  spec.shape.h_q = 1;
  spec.shape.h_kv = 1;
  spec.shape.topk = 1;
  spec.h_i = c.h_i;
  spec.page_size = c.page_size;
  spec.dtype = c.dtype;
  spec.seed = c.seed;
  spec.requests = c.requests;
  Workload w = msa::bench::make_workload(spec);
  // Stale cache slots past each request's k_len hold NaN: no score may depend on them.
  if (c.page_size > 0) {
    const std::int64_t ps = c.page_size, max_pages = w.page_table.shape()[1];
    for (std::size_t b = 0; b < c.requests.size(); ++b)
      for (std::int64_t t = c.requests[b].k_len; t < (c.requests[b].k_len + ps - 1) / ps * ps; ++t) {
        const std::int64_t page = w.page_table.data<std::int32_t>()[std::int64_t(b) * max_pages + t / ps];
        for (std::int64_t i = 0; i < 128; ++i) w.index_k.data<std::uint16_t>()[(page * ps + t % ps) * 128 + i] = 0x7FC0;
      }
  }
  return w;
}

std::int64_t needed_cols(const std::vector<Request>& requests) {
  std::int64_t cols = 1;
  for (const Request& r : requests) cols = std::max<std::int64_t>(cols, (r.k_len + 127) / 128);
  return cols;
}

// index_q [total_q, h_i, d] copied into storage whose head stride is d + pad.
HostTensor padded_index_q(const Workload& w, int h_i, int pad, msa::TensorView& view) {
  const std::int64_t hs = 128 + pad;
  HostTensor storage(w.index_q.dtype(), {w.total_q, h_i, hs});
  for (std::int64_t r = 0; r < w.total_q * h_i; ++r)
    std::memcpy(static_cast<std::uint16_t*>(storage.raw()) + r * hs, static_cast<const std::uint16_t*>(w.index_q.raw()) + r * 128,
                256);
  view = msa::TensorView::strided(storage.raw(), w.index_q.dtype(), {w.total_q, h_i, 128}, {h_i * hs, hs, 1});
  return storage;
}

HostTensor copy_of(const HostTensor& t) {
  HostTensor out(t.dtype(), t.shape());
  std::memcpy(out.raw(), t.raw(), t.bytes());
  return out;
}

msa::Options cuda_options(bool strict = false) {
  msa::Options o;
  o.backend = msa::Backend::kCuda;
  o.strict = strict;
  return o;
}

HostTensor cpu_scores(const Workload& w, int h_i, std::int64_t cols) {
  HostTensor ref(DType::kFP32, {h_i, w.total_q, cols});
  msa::IndexerArgs a{w.index_q.view(), w.index_kv(), w.batch(), ref.view()};
  msa::Indexer op(h_i, 128, 0.f, msa::Options{});
  op.plan(a.batch);
  op.run(a);
  return ref;
}

// The device copies of a workload's indexer inputs.
struct DeviceInputs {
  DeviceTensor q, k, page_table, cu_seqlens_k, cu_q, k_len;
  DeviceInputs(const Workload& w, const HostTensor& q_storage, msa::TensorView q_view)
      : q(q_storage, q_view), k(w.index_k), page_table(w.page_table.numel() > 0, w.page_table, w.page_table.view()),
        cu_seqlens_k(w.cu_seqlens_k.numel() > 0, w.cu_seqlens_k, w.cu_seqlens_k.view()), cu_q(w.cu_seqlens_q),
        k_len(w.k_len) {}
  msa::IndexerArgs args(msa::TensorView scores) const {
    msa::IndexerArgs a;
    a.index_q = q.view;
    a.index_k.k = k.view;
    a.index_k.page_table = page_table.view;
    a.index_k.cu_seqlens_k = cu_seqlens_k.view;
    a.batch = {cu_q.view, k_len.view};
    a.scores = scores;
    return a;
  }
};

// Scores [h_i, total_q, cols] out of storage rows of `pitch`.
HostTensor unpitch(const HostTensor& storage, std::int64_t cols) {
  const auto& s = storage.shape();
  HostTensor out(DType::kFP32, {s[0], s[1], cols});
  for (std::int64_t r = 0; r < s[0] * s[1]; ++r)
    for (std::int64_t c = 0; c < cols; ++c) out.set(r * cols + c, storage.get(r * s[2] + c));
  return out;
}

HostTensor run_cuda(const Workload& w, const Case& c, std::int64_t cols, HostTensor* storage_out = nullptr) {
  msa::TensorView q_view = w.index_q.view();
  const HostTensor padded = c.head_pad > 0 ? padded_index_q(w, c.h_i, c.head_pad, q_view) : HostTensor{};
  const DeviceInputs in(w, c.head_pad > 0 ? padded : w.index_q, q_view);
  const std::int64_t pitch = cols + c.pitch_pad;
  HostTensor storage(DType::kFP32, {c.h_i, w.total_q, pitch});
  DeviceTensor d_scores(storage);
  d_scores.poison(storage);
  msa::TensorView sv = d_scores.view;
  sv.shape[2] = cols;
  msa::Indexer op(c.h_i, 128, 0.f, cuda_options());
  const msa::IndexerArgs a = in.args(sv);
  op.plan(a.batch);
  op.run(a);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  d_scores.download(storage);
  // The padding past cols keeps its poison (NaN bytes).
  for (std::int64_t r = 0; r < c.h_i * w.total_q; ++r)
    for (std::int64_t p = cols; p < pitch; ++p) EXPECT_TRUE(std::isnan(storage.get(r * pitch + p))) << "row " << r;
  if (storage_out != nullptr) *storage_out = copy_of(storage);
  return unpitch(storage, cols);
}

void check_case(const Case& c) {
  const Workload w = make(c);
  const std::int64_t cols = needed_cols(c.requests) + c.extra_cols;
  const HostTensor ref = cpu_scores(w, c.h_i, cols);
  const HostTensor got = run_cuda(w, c, cols);
  EXPECT_TRUE(msa::test::close(got, ref, kScoreTolerance));
}

const std::vector<Request> kChunked = {{70, 1000}, {0, 200}, {1, 1}, {300, 300}, {5, 133}, {260, 2000}, {1, 4096}};

TEST(IndexerCuda, ChunkedBatchOnEveryPageSizeAndFlat) {
  MSA_SKIP_WITHOUT_GPU();
  for (const int ps : {16, 32, 64, 128, 0}) {
    SCOPED_TRACE(testing::Message() << "page " << ps);
    check_case({.requests = kChunked, .page_size = ps, .seed = 10u + ps});
  }
}

TEST(IndexerCuda, IndexHeadsFp16AndStrides) {
  MSA_SKIP_WITHOUT_GPU();
  for (const int h_i : {1, 2, 3, 16}) {
    SCOPED_TRACE(testing::Message() << "h_i " << h_i);
    check_case({.requests = kChunked, .h_i = h_i, .page_size = 32, .seed = 20u + h_i});
  }
  if (msa::test::fp16_instances_built()) check_case({.requests = kChunked, .dtype = DType::kFP16, .seed = 31});
  check_case({.requests = kChunked, .extra_cols = 9, .pitch_pad = 3, .head_pad = 8, .seed = 32});
}

TEST(IndexerCuda, DecodeFormAndLongRows) {
  MSA_SKIP_WITHOUT_GPU();
  // Decode: B requests of Q = 8 queries at the end of their sequences.
  check_case({.requests = {{8, 8}, {8, 129}, {8, 5000}, {8, 1023}, {8, 20000}, {8, 64}}, .page_size = 128, .seed = 41});
  check_case({.requests = {{16, 3000}, {1, 70000}}, .h_i = 2, .page_size = 16, .seed = 42});
  // One long prefill: tiles of 64 queries over up to 47 blocks, several units per tile.
  check_case({.requests = {{6000, 6000}}, .page_size = 64, .seed = 43});
}

TEST(IndexerCuda, BitwiseReproducible) {
  MSA_SKIP_WITHOUT_GPU();
  const Case c{.requests = kChunked, .page_size = 64, .seed = 51};
  const Workload w = make(c);
  const std::int64_t cols = needed_cols(c.requests);
  HostTensor a_storage, b_storage;
  run_cuda(w, c, cols, &a_storage);
  run_cuda(w, c, cols, &b_storage);
  ASSERT_EQ(a_storage.bytes(), b_storage.bytes());
  EXPECT_EQ(std::memcmp(a_storage.raw(), b_storage.raw(), a_storage.bytes()), 0);
}

// run() captured once, replayed after new lengths and new index queries land in the same buffers.
TEST(IndexerCuda, GraphReplaysNewLengthsAndQueries) {
  MSA_SKIP_WITHOUT_GPU();
  Case c{.requests = {{40, 5000}, {3, 300}, {17, 9000}}, .page_size = 64, .seed = 61};
  Workload w = make(c);
  const std::int64_t cols = needed_cols(c.requests);
  const DeviceInputs in(w, w.index_q, w.index_q.view());
  HostTensor scores(DType::kFP32, {c.h_i, w.total_q, cols});
  DeviceTensor d_scores(scores);
  msa::Indexer op(c.h_i, 128, 0.f, cuda_options());
  const msa::IndexerArgs a = in.args(d_scores.view);
  op.plan(a.batch);
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  op.run(a, stream);
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(testing::Message() << "step " << step);
    // Shorter sequences (their pages stay allocated); new queries.
    w.k_len.data<std::int32_t>()[0] = 5000 - 1100 * step;
    w.k_len.data<std::int32_t>()[2] = 9000 - 2500 * step;
    msa::bench::HostTensor fresh = make({.requests = c.requests, .page_size = 64, .seed = 70u + step}).index_q;
    w.index_q = std::move(fresh);
    in.q.upload(w.index_q);
    in.k_len.upload(w.k_len);
    d_scores.poison(scores);
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    d_scores.download(scores);
    EXPECT_TRUE(msa::test::close(scores, cpu_scores(w, c.h_i, cols), kScoreTolerance));
  }
  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(graph));
  CUDA_OK(cudaStreamDestroy(stream));
}

// Without strict mode, tokens on pages outside [0, num_pages) are invisible (docs/numerics.md):
// a block whose pages are all out of range scores -inf, every other block as before. Strict
// mode rejects the entry by name before writing anything.
TEST(IndexerCuda, OutOfRangePagesInvisibleOrRejected) {
  MSA_SKIP_WITHOUT_GPU();
  const Case c{.requests = {{50, 700}}, .page_size = 64, .seed = 81};
  Workload w = make(c);
  const std::int64_t cols = needed_cols(c.requests);
  HostTensor ref = cpu_scores(w, c.h_i, cols);
  // Block 1 = pages 2 and 3 of the request.
  w.page_table.data<std::int32_t>()[2] = static_cast<std::int32_t>(w.num_pages) + 5;
  w.page_table.data<std::int32_t>()[3] = -1;
  for (int h = 0; h < c.h_i; ++h)
    for (std::int64_t q = 0; q < w.total_q; ++q) ref.set((h * w.total_q + q) * cols + 1, -INFINITY);
  EXPECT_TRUE(msa::test::close(run_cuda(w, c, cols), ref, kScoreTolerance));

  const DeviceInputs in(w, w.index_q, w.index_q.view());
  HostTensor scores(DType::kFP32, {c.h_i, w.total_q, cols});
  DeviceTensor d_scores(scores);
  d_scores.poison(scores);
  msa::Indexer strict(c.h_i, 128, 0.f, cuda_options(/*strict=*/true));
  try {
    strict.run(in.args(d_scores.view));
    FAIL() << "no msa::Error";
  } catch (const msa::Error& e) {
    EXPECT_NE(std::string(e.what()).find("page_table"), std::string::npos) << e.what();
  }
  d_scores.download(scores);
  for (std::int64_t i = 0; i < scores.numel(); ++i) ASSERT_TRUE(std::isnan(scores.get(i))) << i;
}

TEST(IndexerCuda, EmptyBatchAndArgumentErrors) {
  MSA_SKIP_WITHOUT_GPU();
  const Case c{.requests = {{0, 10}, {0, 0}}, .page_size = 64, .seed = 91};
  const Workload w = make(c);
  const DeviceInputs in(w, w.index_q, w.index_q.view());
  HostTensor scores(DType::kFP32, {c.h_i, 0, 1});
  DeviceTensor d_scores(scores);
  msa::Indexer op(c.h_i, 128, 0.f, cuda_options());
  op.run(in.args(d_scores.view));  // no rows: no launch
  CUDA_OK(cudaDeviceSynchronize());
  try {  // host scores on the CUDA backend are named
    op.run(in.args(scores.view()));
    FAIL() << "no msa::Error";
  } catch (const msa::Error& e) {
    EXPECT_NE(std::string(e.what()).find("scores"), std::string::npos) << e.what();
  }
  try {  // more index heads than the kernel's 256-row tile
    msa::Indexer wide(300, 128, 0.f, cuda_options());
    HostTensor q(DType::kBF16, {0, 300, 128});
    DeviceTensor d_q(q);
    HostTensor s(DType::kFP32, {300, 0, 1});
    DeviceTensor d_s(s);
    msa::IndexerArgs a = in.args(d_s.view);
    a.index_q = d_q.view;
    wide.run(a);
    FAIL() << "no msa::Error";
  } catch (const msa::Error& e) {
    EXPECT_NE(std::string(e.what()).find("h_i"), std::string::npos) << e.what();
  }
}

}  // namespace
