// The CUDA prefill indexer against its CPU twin (msa::Indexer on the CPU backend), scores within
// spec §7's 2e-4 * max(1, |ref|) and -inf in the same places: varlen chunked batches with empty
// and one-token requests, lengths off the block and page grid, page sizes 16-128 and flat
// caches, NaN in the stale cache slots past k_len, h_i 1..16 (3: tiles of 85 queries), fp16,
// padded score rows and index-query strides, the decode form, rows of 6000 tokens; FP8 E4M3
// index queries and keys (e4m3 WGMMAs) in both forms, against the twin on the same E4M3 values;
// bitwise reproducibility, a CUDA graph replayed with new lengths and queries, invisible tokens on
// out-of-range pages, and strict mode's page-table check before anything is written.
// The fused indexer + top-k (msa::IndexerTopK) against its definition, TopK's exact selection
// (CPU twin) over the CUDA indexer's scores, id for id: both unit splits (rows whole in one unit,
// rows merged from several), top-k 1..32 (lists of 15 and 31), both layouts, FP8, ties, NaN
// blocks, a k_len bound above the lengths, a graph replay, and its argument errors.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "bench/workload.h"
#include "cuda/indexer/launch.h"
#include "msa/msa.h"
#include "tests/support/compare.h"
#include "tests/support/cuda_cases.h"
#include "tests/support/cuda_check.h"
#include "tests/support/cuda_graph.h"
#include "tests/support/device_tensor.h"
#include "tests/support/expect_error.h"

namespace {

using msa::DType;
using msa::bench::HostTensor;
using msa::bench::Request;
using msa::bench::Workload;
using msa::bench::WorkloadSpec;
using msa::test::DeviceTensor;

constexpr msa::bench::Tolerance kScoreTolerance{2e-4, 2e-4, 0.9999};
// FP8 E4M3 index queries and keys: the products are exact, but Hopper's e4m3 WGMMA adds them
// with fewer accumulator bits than FP32 (docs/numerics.md, "FP8 index keys").
constexpr msa::bench::Tolerance kFp8ScoreTolerance{2e-3, 2e-3, 0.9999};

struct Case {
  std::vector<Request> requests;
  int h_i = 4;
  int page_size = 64;  // 0: flat
  DType dtype = DType::kBF16;  // bf16 | fp16 | fp8_e4m3 (index queries and keys both)
  int extra_cols = 0;  // score columns past ceil(max k_len / 128)
  int pitch_pad = 0;   // padding after each score row
  int head_pad = 0;    // index_q head stride d + head_pad
  bool tied_keys = false;  // request 0's keys of block j all equal to level(j) times its first
                           // key (levels 1-4 in a rising cycle: every block ties with a quarter
                           // of the others, and later blocks displace earlier ties), but block
                           // 3, all NaN (its score NaN, ranked below every number)
  std::uint64_t seed = 1;
};

// An E4M3 copy of t (satfinite; NaN stays NaN, code 0x7f).
HostTensor fp8_copy(const HostTensor& t) {
  HostTensor out(DType::kFP8E4M3, t.shape());
  for (std::int64_t i = 0; i < t.numel(); ++i) out.set(i, t.get(i));
  return out;
}

Workload make(const Case& c) {
  WorkloadSpec spec;
  spec.shape.h_q = 1;
  spec.shape.h_kv = 1;
  spec.shape.topk = 1;
  spec.h_i = c.h_i;
  spec.page_size = c.page_size;
  const bool fp8 = c.dtype == DType::kFP8E4M3;
  spec.dtype = fp8 ? DType::kBF16 : c.dtype;  // FP8 index tensors: rounded from bf16 ones below
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
  if (c.tied_keys) {  // paged caches only
    const std::int64_t ps = c.page_size;
    const auto* pt = w.page_table.data<std::int32_t>();
    const std::int64_t first = pt[0] * ps * 128;
    for (std::int64_t t = 1; t < c.requests[0].k_len; ++t) {
      const std::int64_t row = (pt[t / ps] * ps + t % ps) * 128, block = t / 128;
      for (std::int64_t i = 0; i < 128; ++i)
        w.index_k.set(row + i, block == 3 ? NAN : static_cast<float>(1 + block % 4) * w.index_k.get(first + i));
    }
  }
  if (fp8) {
    w.index_q = fp8_copy(w.index_q);
    w.index_k = fp8_copy(w.index_k);
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
  const auto bytes = static_cast<std::int64_t>(msa::dtype_size(w.index_q.dtype()));
  HostTensor storage(w.index_q.dtype(), {w.total_q, h_i, hs});
  for (std::int64_t r = 0; r < w.total_q * h_i; ++r)
    std::memcpy(static_cast<std::uint8_t*>(storage.raw()) + r * hs * bytes,
                static_cast<const std::uint8_t*>(w.index_q.raw()) + r * 128 * bytes, static_cast<std::size_t>(128 * bytes));
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
  if (c.dtype == DType::kFP8E4M3) {  // the measured error, for docs/numerics.md
    std::printf("fp8 index scores (seed %llu): %s\n", static_cast<unsigned long long>(c.seed),
                msa::bench::compare(got, ref, kFp8ScoreTolerance).summary().c_str());
    EXPECT_TRUE(msa::test::close(got, ref, kFp8ScoreTolerance));
  } else {
    EXPECT_TRUE(msa::test::close(got, ref, kScoreTolerance));
  }
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

// FP8 E4M3 index queries and keys (MSA's q8kv8): the prefill form on every page size and flat,
// index heads 1-16, strided queries, and the decode form, against the CPU twin reading the same
// E4M3 values.
TEST(IndexerCuda, Fp8E4m3IndexQueriesAndKeys) {
  MSA_SKIP_WITHOUT_GPU();
  for (const int ps : {16, 64, 128, 0}) {
    SCOPED_TRACE(testing::Message() << "page " << ps);
    check_case({.requests = kChunked, .page_size = ps, .dtype = DType::kFP8E4M3, .seed = 110u + ps});
  }
  for (const int h_i : {1, 3, 16}) {
    SCOPED_TRACE(testing::Message() << "h_i " << h_i);
    check_case({.requests = kChunked, .h_i = h_i, .page_size = 32, .dtype = DType::kFP8E4M3, .seed = 120u + h_i});
  }
  check_case({.requests = kChunked, .dtype = DType::kFP8E4M3, .extra_cols = 5, .pitch_pad = 2, .head_pad = 16,
              .seed = 131});
  // The decode form: B requests of Q = 8 at the ends of their sequences, one and four heads.
  const std::vector<Request> decode = {{8, 8}, {8, 129}, {8, 5000}, {8, 1023}, {8, 20000}, {8, 64}};
  check_case({.requests = decode, .h_i = 1, .page_size = 128, .dtype = DType::kFP8E4M3, .seed = 141});
  check_case({.requests = decode, .h_i = 4, .page_size = 64, .dtype = DType::kFP8E4M3, .seed = 142});
  // One long prefill: several units per tile.
  check_case({.requests = {{3000, 6000}}, .page_size = 128, .dtype = DType::kFP8E4M3, .seed = 143});
}

TEST(IndexerCuda, BitwiseReproducible) {
  MSA_SKIP_WITHOUT_GPU();
  for (const DType dtype : {DType::kBF16, DType::kFP8E4M3}) {
    SCOPED_TRACE(msa::dtype_name(dtype));
    const Case c{.requests = kChunked, .page_size = 64, .dtype = dtype, .seed = 51};
    const Workload w = make(c);
    const std::int64_t cols = needed_cols(c.requests);
    HostTensor a_storage, b_storage;
    run_cuda(w, c, cols, &a_storage);
    run_cuda(w, c, cols, &b_storage);
    ASSERT_EQ(a_storage.bytes(), b_storage.bytes());
    EXPECT_EQ(std::memcmp(a_storage.raw(), b_storage.raw(), a_storage.bytes()), 0);
  }
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
  const msa::test::CapturedGraph graph(
      stream, [&](cudaStream_t s) { op.run(a, s); }, cudaStreamCaptureModeThreadLocal);
  ASSERT_TRUE(graph.ok());
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
    CUDA_OK(graph.launch(stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    d_scores.download(scores);
    EXPECT_TRUE(msa::test::close(scores, cpu_scores(w, c.h_i, cols), kScoreTolerance));
  }
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
  // Strict mode reads the device batch on the host: an empty batch is no error.
  msa::Indexer strict(c.h_i, 128, 0.f, cuda_options(/*strict=*/true));
  EXPECT_NO_THROW(strict.run(in.args(d_scores.view)));
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
  try {  // FP8 index queries with bf16 keys: the keys' dtype is named
    HostTensor q(DType::kFP8E4M3, {0, c.h_i, 128});
    DeviceTensor d_q(q);
    msa::IndexerArgs a = in.args(d_scores.view);
    a.index_q = d_q.view;
    op.run(a);
    FAIL() << "no msa::Error";
  } catch (const msa::Error& e) {
    EXPECT_NE(std::string(e.what()).find("index_k.k.dtype"), std::string::npos) << e.what();
  }
}

// ---- the fused indexer + top-k -----------------------------------------------------------

struct FusedCase {
  Case c;
  int k = 16;
  std::int64_t extra_len = 0;  // planned max_k_len past the longest request
  bool query_major = false;    // topk as [total_q, h_i, k] seen through an [h_i, total_q, k] view
  int split = 0;               // 1: rows must be whole in one unit (no merge); 2: split; 0: either
};

std::int64_t max_len(const std::vector<Request>& requests) {
  std::int64_t m = 0;
  for (const Request& r : requests) m = std::max<std::int64_t>(m, r.k_len);
  return m;
}

// The definition: the CPU TopK (exact) over scores [h_i, total_q, cols].
HostTensor topk_of(const Workload& w, const HostTensor& scores, int h_i, int k) {
  HostTensor ids(DType::kInt32, {h_i, w.total_q, k});
  msa::TopK op(k);
  op.run({scores.view(), w.batch(), ids.view()});
  return ids;
}

// IndexerTopK on the device; ids as [h_i, total_q, k] whatever the layout it wrote.
HostTensor run_fused(const Workload& w, const FusedCase& f, std::int64_t max_k_len, bool strict = false) {
  const int h_i = f.c.h_i;
  const DeviceInputs in(w, w.index_q, w.index_q.view());
  HostTensor out(DType::kInt32, f.query_major ? std::vector<std::int64_t>{w.total_q, h_i, f.k}
                                              : std::vector<std::int64_t>{h_i, w.total_q, f.k});
  DeviceTensor d_out(out);
  d_out.poison(out);
  msa::TensorView view = d_out.view;
  if (f.query_major)
    view = msa::TensorView::strided(d_out.ptr, DType::kInt32, {h_i, w.total_q, f.k}, {f.k, h_i * f.k, 1},
                                    msa::Device::kCuda);
  msa::IndexerTopK op(h_i, 128, f.k, 0.f, cuda_options(strict));
  op.plan({static_cast<std::int64_t>(f.c.requests.size()), w.total_q, max_k_len});
  const msa::IndexerArgs a = in.args({});
  op.run({a.index_q, a.index_k, a.batch, view});
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  d_out.download(out);
  if (!f.query_major) return out;
  HostTensor ids(DType::kInt32, {h_i, w.total_q, f.k});
  for (int h = 0; h < h_i; ++h)
    for (std::int64_t q = 0; q < w.total_q; ++q)
      for (int s = 0; s < f.k; ++s)
        ids.data<std::int32_t>()[(h * w.total_q + q) * f.k + s] = out.data<std::int32_t>()[(q * h_i + h) * f.k + s];
  return ids;
}

// Rows whose ids differ (the first few printed); rows that rank candidates (local >= k) counted
// into `ranked`, so that a case which never reaches the selection cannot pass silently.
int id_mismatches(const HostTensor& got, const HostTensor& want, int k, int* ranked) {
  int bad = 0;
  *ranked = 0;
  const std::int64_t rows = want.numel() / k;
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto* g = got.data<std::int32_t>() + r * k;
    const auto* e = want.data<std::int32_t>() + r * k;
    if (e[k - 1] >= k) ++*ranked;
    if (std::memcmp(g, e, sizeof(std::int32_t) * static_cast<std::size_t>(k)) == 0) continue;
    if (++bad <= 3) {
      std::string line = "row " + std::to_string(r) + ": got";
      for (int s = 0; s < k; ++s) line += " " + std::to_string(g[s]);
      line += " | want";
      for (int s = 0; s < k; ++s) line += " " + std::to_string(e[s]);
      ADD_FAILURE() << line;
    }
  }
  return bad;
}

void check_fused(const FusedCase& f) {
  const Workload w = make(f.c);
  const std::int64_t max_k_len = max_len(f.c.requests) + f.extra_len;
  const std::int64_t cols = std::max<std::int64_t>(1, (max_k_len + 127) / 128);
  const msa::ProblemSize problem{static_cast<std::int64_t>(f.c.requests.size()), w.total_q, max_k_len};
  // The split the operator plans for this problem (workspace_bytes() is a bound over every smaller
  // problem too, so it does not tell whether this one splits); the workspace holds its lists.
  const msa::cuda::IndexerTopkSplit split = msa::cuda::indexer_topk_split(f.c.h_i, f.k, problem);
  const std::size_t ws = msa::IndexerTopK::workspace_bytes(f.c.h_i, f.k, problem, cuda_options());
  EXPECT_GE(ws, split.workspace_bytes);
  if (f.split == 1) {
    EXPECT_EQ(split.chunks, 1) << "expected every row whole in one unit";
    EXPECT_EQ(split.workspace_bytes, 0u);
  }
  if (f.split == 2) {
    EXPECT_GT(split.chunks, 1) << "expected rows split over units (the merge)";
    EXPECT_GT(split.workspace_bytes, 0u);
  }
  const HostTensor want = topk_of(w, run_cuda(w, f.c, cols), f.c.h_i, f.k);
  const HostTensor got = run_fused(w, f, max_k_len);
  int ranked = 0;
  EXPECT_EQ(id_mismatches(got, want, f.k, &ranked), 0);
  EXPECT_GT(ranked, 0) << "no row ranks its candidates";
}

TEST(IndexerTopkCuda, MergedRowsOnEveryPageSizeAndFlat) {
  MSA_SKIP_WITHOUT_GPU();
  for (const int ps : {16, 32, 64, 128, 0}) {
    SCOPED_TRACE(testing::Message() << "page " << ps);
    check_fused({.c = {.requests = kChunked, .page_size = ps, .seed = 210u + ps}, .split = 2});
  }
}

// 275 tiles of 4 queries x 64 heads: every row whole in one unit, its ids written by the indexer
// kernel itself; top-k 1..32 on both unit splits.
TEST(IndexerTopkCuda, WholeRowsAndEveryTopkWidth) {
  MSA_SKIP_WITHOUT_GPU();
  const std::vector<Request> many = {{1060, 5000}, {40, 900}};
  for (const int k : {16, 1, 5, 32}) {
    SCOPED_TRACE(testing::Message() << "whole rows, k " << k);
    check_fused({.c = {.requests = many, .h_i = 64, .page_size = 64, .seed = 220u + k}, .k = k, .split = 1});
  }
  const std::vector<Request> longer = {{70, 1000}, {0, 200}, {1, 1}, {300, 6000}, {5, 133}, {2, 4500}};
  for (const int k : {1, 2, 15, 17, 32}) {
    SCOPED_TRACE(testing::Message() << "merged rows, k " << k);
    check_fused({.c = {.requests = longer, .page_size = 32, .seed = 230u + k}, .k = k, .split = 2});
  }
}

TEST(IndexerTopkCuda, DecodeLayoutFp8TiesAndBounds) {
  MSA_SKIP_WITHOUT_GPU();
  const std::vector<Request> decode = {{8, 8}, {8, 129}, {8, 5000}, {8, 1023}, {8, 20000}, {8, 64}};
  check_fused({.c = {.requests = decode, .page_size = 128, .seed = 241}, .query_major = true});
  check_fused({.c = {.requests = decode, .h_i = 1, .page_size = 64, .dtype = DType::kFP8E4M3, .seed = 242},
               .query_major = true});
  check_fused({.c = {.requests = kChunked, .page_size = 64, .dtype = DType::kFP8E4M3, .seed = 243}});
  if (msa::test::fp16_instances_built())
    check_fused({.c = {.requests = kChunked, .h_i = 3, .dtype = DType::kFP16, .seed = 244}});
  // Ties everywhere but a NaN block, merged and whole rows: ids by the smaller id, NaN last.
  check_fused({.c = {.requests = {{300, 3000}, {5, 133}}, .page_size = 64, .tied_keys = true, .seed = 245}});
  check_fused({.c = {.requests = {{1100, 3000}}, .h_i = 64, .page_size = 64, .tied_keys = true, .seed = 246},
               .split = 1});
  // A bound far above the lengths: more columns per unit, same ids.
  check_fused({.c = {.requests = kChunked, .page_size = 16, .seed = 247}, .extra_len = 50000});
  check_fused({.c = {.requests = {{6000, 6000}}, .page_size = 128, .seed = 248}});
}

TEST(IndexerTopkCuda, BitwiseReproducibleAndGraphReplay) {
  MSA_SKIP_WITHOUT_GPU();
  const FusedCase f{.c = {.requests = {{40, 5000}, {3, 300}, {17, 9000}}, .page_size = 64, .seed = 251}};
  Workload w = make(f.c);
  const std::int64_t max_k_len = 9000;
  const HostTensor first = run_fused(w, f, max_k_len);
  const HostTensor again = run_fused(w, f, max_k_len);
  EXPECT_EQ(std::memcmp(first.raw(), again.raw(), first.bytes()), 0);

  // run() captured once, replayed after new lengths and queries land in the same buffers.
  const DeviceInputs in(w, w.index_q, w.index_q.view());
  HostTensor out(DType::kInt32, {f.c.h_i, w.total_q, f.k});
  DeviceTensor d_out(out);
  msa::IndexerTopK op(f.c.h_i, 128, f.k, 0.f, cuda_options());
  op.plan({3, w.total_q, max_k_len});
  const msa::IndexerArgs a = in.args({});
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const msa::test::CapturedGraph graph(
      stream,
      [&](cudaStream_t s) {
        op.run({a.index_q, a.index_k, a.batch, d_out.view}, s);
      },
      cudaStreamCaptureModeThreadLocal);
  ASSERT_TRUE(graph.ok());
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(testing::Message() << "step " << step);
    w.k_len.data<std::int32_t>()[0] = 5000 - 1100 * step;
    w.k_len.data<std::int32_t>()[2] = 9000 - 2500 * step;
    w.index_q = make({.requests = f.c.requests, .page_size = 64, .seed = 260u + step}).index_q;
    in.q.upload(w.index_q);
    in.k_len.upload(w.k_len);
    d_out.poison(out);
    CUDA_OK(graph.launch(stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    d_out.download(out);
    const HostTensor want = topk_of(w, run_cuda(w, f.c, (max_k_len + 127) / 128), f.c.h_i, f.k);
    int ranked = 0;
    EXPECT_EQ(id_mismatches(out, want, f.k, &ranked), 0);
    EXPECT_GT(ranked, 0);
  }
  CUDA_OK(cudaStreamDestroy(stream));
}

// k_len above the planned bound: strict mode names it before writing; otherwise blocks past
// the bound are not ranked, exactly as TopK over the indexer's scores cut at the bound.
TEST(IndexerTopkCuda, LengthsPastTheBoundAndArgumentErrors) {
  MSA_SKIP_WITHOUT_GPU();
  const FusedCase f{.c = {.requests = {{30, 4000}, {8, 2500}}, .page_size = 64, .seed = 271}};
  const Workload w = make(f.c);
  const std::int64_t bound = 2000;  // 16 columns
  try {
    run_fused(w, f, bound, /*strict=*/true);
    FAIL() << "no msa::Error";
  } catch (const msa::Error& e) {
    EXPECT_NE(std::string(e.what()).find("k_len[0]"), std::string::npos) << e.what();
  }
  // The definition on the device: the indexer's scores cut at 16 columns, then TopK.
  const DeviceInputs in(w, w.index_q, w.index_q.view());
  HostTensor scores(DType::kFP32, {f.c.h_i, w.total_q, 16});
  DeviceTensor d_scores(scores);
  HostTensor want(DType::kInt32, {f.c.h_i, w.total_q, f.k});
  DeviceTensor d_want(want);
  msa::Indexer indexer(f.c.h_i, 128, 0.f, cuda_options());
  indexer.run(in.args(d_scores.view));
  msa::TopK topk(f.k, cuda_options());
  topk.run({d_scores.view, in.args({}).batch, d_want.view});
  CUDA_OK(cudaDeviceSynchronize());
  d_want.download(want);
  int ranked = 0;
  EXPECT_EQ(id_mismatches(run_fused(w, f, bound), want, f.k, &ranked), 0);
  EXPECT_GT(ranked, 0);

  msa::Options quantised = cuda_options();
  quantised.topk_ranking = msa::TopkRanking::kQuantised16;
  msa::test::expect_error_mentioning([&] { msa::IndexerTopK op(4, 128, 16, 0.f, quantised); },
                                     "options.topk_ranking");
  msa::test::expect_error_mentioning([&] { msa::IndexerTopK op(4, 128, 33, 0.f, cuda_options()); }, "topk");
  msa::IndexerTopK op(f.c.h_i, 128, f.k, 0.f, cuda_options());
  const msa::IndexerArgs a = in.args({});
  msa::test::expect_error_mentioning([&] { op.run({a.index_q, a.index_k, a.batch, d_want.view}); }, "plan");
  op.plan({2, w.total_q + 1, 4000});
  msa::test::expect_error_mentioning([&] { op.run({a.index_q, a.index_k, a.batch, d_want.view}); },
                                     "index_q.shape[0]");
  op.plan({2, w.total_q, 4000});
  msa::test::expect_error_mentioning([&] { op.run({a.index_q, a.index_k, a.batch, want.view()}); },
                                     "topk");  // host memory
}

}  // namespace
