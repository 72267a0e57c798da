// Hostile input on the CUDA backend (issue "hostile input", CUDA items): strict mode on device
// tensors, page-table entries out of range (strict: named; otherwise their tokens are invisible,
// nothing read out of bounds), run() given other tensors than plan(), and no visible GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "bench/compare.h"
#include "bench/workload.h"
#include "cpu/reference.h"
#include "cuda/api/decode_params.h"
#include "cuda/api/prefill_route.h"
#include "cuda/prefill/sm90/tile_union/geometry.h"
#include "msa/msa.h"
#include "tests/support/cuda_check.h"
#include "tests/support/device_tensor.h"
#include "tests/support/expect_error.h"
#include "tests/support/host_tensor.h"

namespace {

using msa::bench::HostTensor;
using msa::bench::Request;
using msa::bench::Workload;
using msa::bench::WorkloadSpec;

using msa::test::DeviceTensor;
using msa::test::expect_error;


WorkloadSpec spec_of(int page_size, std::vector<Request> requests, std::uint64_t seed) {
  WorkloadSpec s;
  s.shape = {.h_q = 16, .h_kv = 2, .d = 128, .topk = 8};
  s.page_size = page_size;
  s.requests = std::move(requests);
  s.selection = msa::bench::Selection::kRandom;
  s.seed = seed;
  return s;
}

HostTensor sevens(msa::DType dtype, std::vector<std::int64_t> shape) {
  HostTensor t(dtype, std::move(shape));
  t.fill(7.f);
  return t;
}

// Every tensor of a workload on the device, with device outputs filled with 7.0.
struct DeviceCase {
  Workload w;
  HostTensor h_out, h_lse;
  DeviceTensor q, k, v, cu, kl, topk, pt, cuk, out, lse;
  msa::PrefillArgs a;
  std::int64_t max_k_len = 0;

  explicit DeviceCase(const WorkloadSpec& spec)
      : w(msa::bench::make_workload(spec)),
        h_out(sevens(msa::DType::kBF16, {w.total_q, spec.shape.h_q, 128})),
        h_lse(sevens(msa::DType::kFP32, {w.total_q, spec.shape.h_q})),
        q(w.q),
        k(w.k, w.kv().k),
        v(w.v, w.kv().v),
        cu(w.cu_seqlens_q),
        kl(w.k_len),
        topk(w.topk),
        pt(spec.page_size > 0, w.page_table, w.page_table.view()),
        cuk(spec.page_size == 0, w.cu_seqlens_k, w.cu_seqlens_k.view()),
        out(h_out),
        lse(h_lse) {
    a.q = q.view;
    a.kv.k = k.view;
    a.kv.v = v.view;
    a.kv.page_table = pt.view;
    a.kv.cu_seqlens_k = cuk.view;
    a.batch = {cu.view, kl.view};
    a.topk = topk.view;
    a.out = out.view;
    a.lse = lse.view;
    for (const Request& r : spec.requests) max_k_len = std::max<std::int64_t>(max_k_len, r.k_len);
  }

  // True when the device outputs still hold the 7.0 they were filled with.
  bool untouched() {
    HostTensor o(msa::DType::kBF16, h_out.shape()), l(msa::DType::kFP32, h_lse.shape());
    out.download(o);
    lse.download(l);
    for (std::int64_t i = 0; i < o.numel(); ++i)
      if (o.get(i) != 7.f) return false;
    for (std::int64_t i = 0; i < l.numel(); ++i)
      if (l.get(i) != 7.f) return false;
    return true;
  }
};

msa::Options cuda_options(bool strict, msa::PrefillPath path = msa::PrefillPath::kAuto) {
  msa::Options o;
  o.backend = msa::Backend::kCuda;
  o.strict = strict;
  o.prefill_path = path;
  return o;
}

// msa::lengths_from_offsets on device tensors: the CPU twin's values over several thread
// blocks (hostile offsets included), on a stream, and a host tensor beside a device one refused.
TEST(HostileCuda, LengthsFromOffsetsOnTheDevice) {
  MSA_SKIP_WITHOUT_GPU();
  using msa::DType;
  using msa::TensorView;
  constexpr std::int64_t kBatch = 1000;
  std::vector<std::int32_t> off(kBatch + 1), want(kBatch), got(kBatch, -7);
  for (std::int64_t b = 0; b <= kBatch; ++b) off[b] = static_cast<std::int32_t>(b * b % 7919 + 31 * b);
  off[500] = INT32_MIN;
  off[501] = INT32_MAX;
  msa::lengths_from_offsets(TensorView::contiguous(off.data(), DType::kInt32, {kBatch + 1}),
                            TensorView::contiguous(want.data(), DType::kInt32, {kBatch}));
  EXPECT_EQ(want[500], -1);  // INT32_MAX - INT32_MIN, wrapped
  msa::test::DeviceBuffer d_off(off.data(), off.size() * 4), d_len(got.data(), got.size() * 4);
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreate(&stream));
  msa::lengths_from_offsets(TensorView::contiguous(d_off.get(), DType::kInt32, {kBatch + 1}, msa::Device::kCuda),
                            TensorView::contiguous(d_len.get(), DType::kInt32, {kBatch}, msa::Device::kCuda), stream);
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaStreamDestroy(stream));
  CUDA_OK(cudaMemcpy(got.data(), d_len.get(), got.size() * 4, cudaMemcpyDeviceToHost));
  EXPECT_EQ(got, want);
  msa::test::expect_error(
      [&] {
        msa::lengths_from_offsets(TensorView::contiguous(d_off.get(), DType::kInt32, {kBatch + 1}, msa::Device::kCuda),
                                  TensorView::contiguous(want.data(), DType::kInt32, {kBatch}));
      },
      "lengths.device", "cpu");
}

TEST(HostileCuda, StrictModeChecksDeviceTopkAndLengths) {
  MSA_SKIP_WITHOUT_GPU();
  DeviceCase c(spec_of(64, {{40, 900}, {3, 3}}, 21));
  // Head 1, query 41 (request 1, local block 0): a full row is [0, -1, ...]; a duplicate 0 breaks it.
  HostTensor bad = msa::test::copy_of(c.w.topk);
  bad.data<std::int32_t>()[(1 * 43 + 41) * 8 + 1] = 0;
  c.topk.upload(bad);
  msa::SparsePrefill strict(c.w.spec.shape, cuda_options(true));
  expect_error([&] { strict.plan(c.a.batch, c.a.topk, c.max_k_len, nullptr); }, "topk[1, 41, 1]", "0");
  // Without strict the same rows plan (the selection is the set of valid ids).
  msa::SparsePrefill lenient(c.w.spec.shape, cuda_options(false));
  EXPECT_NO_THROW(lenient.plan(c.a.batch, c.a.topk, c.max_k_len, nullptr));
  // A device k_len beyond the bound the plan was sized for.
  c.topk.upload(c.w.topk);
  expect_error([&] { strict.plan(c.a.batch, c.a.topk, 899, nullptr); }, "k_len[0]", "900");
  // An empty device batch with query rows in top-k: the kernels would search no request.
  msa::VarlenBatch empty = c.a.batch;
  empty.k_len.shape[0] = 0;
  empty.cu_seqlens_q.shape[0] = 1;
  expect_error([&] { lenient.plan(empty, c.a.topk, c.max_k_len, nullptr); }, "topk.shape[1]", "43");
  EXPECT_NO_THROW(strict.plan(c.a.batch, c.a.topk, c.max_k_len, nullptr));
}

// Strict mode copies device batch and top-k to the host to check them: requests without new
// tokens (total_q 0, an empty top-k) are valid, on every path, in plan() and run().
TEST(HostileCuda, StrictModeAcceptsAnEmptyDeviceBatch) {
  MSA_SKIP_WITHOUT_GPU();
  DeviceCase c(spec_of(64, {{0, 900}, {0, 3}}, 23));
  ASSERT_EQ(c.w.total_q, 0);
  for (const auto path : {msa::PrefillPath::kAuto, msa::PrefillPath::kBlockMajor, msa::PrefillPath::kTileUnion}) {
    msa::SparsePrefill strict(c.w.spec.shape, cuda_options(true, path));
    EXPECT_NO_THROW(strict.plan(c.a.batch, c.a.topk, c.max_k_len, nullptr)) << msa::prefill_path_name(path);
    EXPECT_NO_THROW(strict.run(c.a, nullptr)) << msa::prefill_path_name(path);
  }
  CUDA_OK(cudaDeviceSynchronize());
}

// Page-table entries out of range (and a table narrower than the requests): strict run() names
// the entry; otherwise those pages' tokens are invisible, as in the CPU oracle
// (cpu::sparse_prefill_gather skips them), on both kernels.
void check_bad_pages(int page_size, msa::PrefillPath path) {
  DeviceCase c(spec_of(page_size, {{300, 1200}, {64, 64}, {5, 700}}, 22 + page_size));
  auto* pt = c.w.page_table.data<std::int32_t>();
  const std::int64_t cols = c.w.page_table.shape()[1];
  const std::int64_t pages = c.w.num_pages;
  pt[0 * cols + 2] = static_cast<std::int32_t>(pages);      // request 0, its third page
  pt[0 * cols + 7] = -3;                                     // and its eighth
  pt[2 * cols + 1] = static_cast<std::int32_t>(pages + 99);  // request 2, its second page
  c.pt.upload(c.w.page_table);
  const std::string first = "page_table[0, 2]";

  msa::SparsePrefill strict(c.w.spec.shape, cuda_options(true, path));
  strict.plan(c.a.batch, c.a.topk, c.max_k_len, nullptr);
  expect_error([&] { strict.run(c.a, nullptr); }, first, std::to_string(pages));
  EXPECT_TRUE(c.untouched());

  // The FP64 oracle with the same table (host copy of the modified entries).
  const auto& s = c.w.spec.shape;
  HostTensor ref_out(msa::DType::kBF16, {c.w.total_q, s.h_q, 128}), ref_lse(msa::DType::kFP32, {c.w.total_q, s.h_q});
  msa::cpu::sparse_prefill_gather(s, c.w.prefill_args(ref_out, ref_lse));

  msa::SparsePrefill op(s, cuda_options(false, path));
  op.plan(c.a.batch, c.a.topk, c.max_k_len, nullptr);
  op.run(c.a, nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  HostTensor out(msa::DType::kBF16, {c.w.total_q, s.h_q, 128}), lse(msa::DType::kFP32, {c.w.total_q, s.h_q});
  c.out.download(out);
  c.lse.download(lse);
  const auto r_out = msa::bench::compare(out, ref_out, {});
  EXPECT_TRUE(r_out.ok) << "page " << page_size << " out: " << r_out.summary();
  const auto r_lse = msa::bench::compare(lse, ref_lse, {.atol = 1e-3, .rtol = 0.0, .min_cosine = 0.0});
  EXPECT_TRUE(r_lse.ok) << "page " << page_size << " lse: " << r_lse.summary();

  // A table narrower than request 0 needs: the pages past its columns are invisible too.
  msa::PrefillArgs narrow = c.a;
  narrow.kv.page_table.shape[1] = 3;
  msa::PrefillArgs ref_args = c.w.prefill_args(ref_out, ref_lse);
  ref_args.kv.page_table.shape[1] = 3;
  msa::cpu::sparse_prefill_gather(s, ref_args);
  op.run(narrow, nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  c.out.download(out);
  c.lse.download(lse);
  const auto n_out = msa::bench::compare(out, ref_out, {});
  EXPECT_TRUE(n_out.ok) << "page " << page_size << " narrow table out: " << n_out.summary();
  const auto n_lse = msa::bench::compare(lse, ref_lse, {.atol = 1e-3, .rtol = 0.0, .min_cosine = 0.0});
  EXPECT_TRUE(n_lse.ok) << "page " << page_size << " narrow table lse: " << n_lse.summary();
}

TEST(HostileCuda, PagesOutOfRangeBlockMajor16) {
  MSA_SKIP_WITHOUT_GPU();
  check_bad_pages(16, msa::PrefillPath::kBlockMajor);
}
TEST(HostileCuda, PagesOutOfRangeBlockMajor128) {
  MSA_SKIP_WITHOUT_GPU();
  check_bad_pages(128, msa::PrefillPath::kBlockMajor);
}
TEST(HostileCuda, PagesOutOfRangeTileUnion32) {
  MSA_SKIP_WITHOUT_GPU();
  check_bad_pages(32, msa::PrefillPath::kTileUnion);
}
TEST(HostileCuda, PagesOutOfRangeTileUnion128) {
  MSA_SKIP_WITHOUT_GPU();
  check_bad_pages(128, msa::PrefillPath::kTileUnion);
}

TEST(HostileCuda, StrictRunNamesNonFiniteSinks) {
  MSA_SKIP_WITHOUT_GPU();
  WorkloadSpec spec = spec_of(64, {{40, 900}}, 23);
  spec.sinks = true;
  DeviceCase c(spec);
  c.w.sinks.set(5, INFINITY);
  DeviceTensor sinks(c.w.sinks);
  c.a.sinks = sinks.view;
  msa::SparsePrefill strict(c.w.spec.shape, cuda_options(true));
  strict.plan(c.a.batch, c.a.topk, c.max_k_len, nullptr);
  expect_error([&] { strict.run(c.a, nullptr); }, "sinks[5]", "inf");
  EXPECT_TRUE(c.untouched());
}

// Without strict, non-finite sinks are ignored: the same bytes as no sinks at all, as on the CPU.
TEST(HostileCuda, NonFiniteSinksAreIgnored) {
  MSA_SKIP_WITHOUT_GPU();
  WorkloadSpec spec = spec_of(64, {{40, 900}, {7, 300}}, 25);
  spec.sinks = true;
  DeviceCase c(spec);
  const auto& s = c.w.spec.shape;
  msa::SparsePrefill op(s, cuda_options(false));
  op.plan(c.a.batch, c.a.topk, c.max_k_len, nullptr);
  op.run(c.a, nullptr);  // no sinks
  CUDA_OK(cudaDeviceSynchronize());
  HostTensor none_out(msa::DType::kBF16, {c.w.total_q, s.h_q, 128}), none_lse(msa::DType::kFP32, {c.w.total_q, s.h_q});
  c.out.download(none_out);
  c.lse.download(none_lse);
  for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    for (std::int64_t h = 0; h < c.w.sinks.numel(); ++h) c.w.sinks.set(h, bad);
    DeviceTensor sinks(c.w.sinks);
    msa::PrefillArgs a = c.a;
    a.sinks = sinks.view;
    op.run(a, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    HostTensor out(msa::DType::kBF16, {c.w.total_q, s.h_q, 128}), lse(msa::DType::kFP32, {c.w.total_q, s.h_q});
    c.out.download(out);
    c.lse.download(lse);
    EXPECT_EQ(std::memcmp(out.raw(), none_out.raw(), out.bytes()), 0) << "sink " << bad;
    EXPECT_EQ(std::memcmp(lse.raw(), none_lse.raw(), lse.bytes()), 0) << "sink " << bad;
  }
}

TEST(HostileCuda, RunWithOtherTensorsThanPlannedIsRejected) {
  MSA_SKIP_WITHOUT_GPU();
  DeviceCase c(spec_of(64, {{2, 8}, {8, 8}}, 24));
  msa::SparsePrefill op(c.w.spec.shape, cuda_options(false));
  op.plan(c.a.batch, c.a.topk, c.max_k_len, nullptr);
  // Another device k_len (same shape): the plan was built from the first one's values.
  DeviceTensor other_kl(c.w.k_len);
  msa::PrefillArgs a = c.a;
  a.batch.k_len = other_kl.view;
  expect_error([&] { op.run(a, nullptr); }, "k_len.data",
               std::to_string(reinterpret_cast<std::uintptr_t>(other_kl.ptr)));
  a = c.a;
  a.topk.shape[1] = 9;  // another total_q
  expect_error([&] { op.run(a, nullptr); }, "topk.shape[1]", "9");
  EXPECT_TRUE(c.untouched());

  // Host batch tensors are compared by value: cu_seqlens_q [0, 2, 10] planned, [0, 8, 10] run.
  msa::SparsePrefill host_planned(c.w.spec.shape, cuda_options(false));
  host_planned.plan(c.w.batch(), c.a.topk, c.max_k_len, nullptr);
  HostTensor cu(msa::DType::kInt32, {3});
  cu.data<std::int32_t>()[0] = 0;
  cu.data<std::int32_t>()[1] = 8;
  cu.data<std::int32_t>()[2] = 10;
  a = c.a;
  a.batch = c.w.batch();
  a.batch.cu_seqlens_q = cu.view();
  expect_error([&] { host_planned.run(a, nullptr); }, "cu_seqlens_q[1]", "8");
  EXPECT_TRUE(c.untouched());
  a.batch = c.w.batch();
  EXPECT_NO_THROW(host_planned.run(a, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_FALSE(c.untouched());
}

// A device batch changed after plan() into one no valid batch is (cu_seqlens_q out of order and
// past total_q, a k_len below its q_len) and every top-k row [0, 1, -1, ...]: results are
// unspecified, but no path may read or write out of bounds, hang or fail (docs/numerics.md). At
// G = 1 the forced tile-union path takes the wide tiles (128 queries, no plan): there queries
// 192-255 (request 3 now, k_len 1) share tile 128's segment 0 with queries of request 0 (k_len
// 16000), and a bit past the segment's visible blocks once named a segment no query wrote (its
// request and page-table row stale). Run repeatedly, since which request's k_len the segment
// keeps is a race; compute-sanitizer memcheck over HostileCuda (scripts/gpu_check.sh
// --sanitize) makes any stray access fail the run. The automatic (routed, narrow tiles) and
// block-major paths run the same batch.
TEST(HostileCuda, BatchBrokenOnTheDeviceAfterPlanStaysInBounds) {
  MSA_SKIP_WITHOUT_GPU();
  WorkloadSpec spec = spec_of(128, {{64, 16000}, {64, 200}, {64, 200}, {64, 64}}, 41);
  spec.shape = {.h_q = 4, .h_kv = 4, .d = 128, .topk = 16};
  DeviceCase c(spec);
  HostTensor cu(msa::DType::kInt32, {5}), kl(msa::DType::kInt32, {4});
  const std::int32_t broken_cu[] = {0, 17000, 192, 0, 1}, broken_kl[] = {16000, 200, 200, 1};
  std::memcpy(cu.raw(), broken_cu, sizeof broken_cu);
  std::memcpy(kl.raw(), broken_kl, sizeof broken_kl);
  HostTensor rows(msa::DType::kInt32, c.w.topk.shape());
  auto* r = rows.data<std::int32_t>();
  for (std::int64_t i = 0; i < rows.numel(); ++i)
    r[i] = i % spec.shape.topk < 2 ? static_cast<std::int32_t>(i % spec.shape.topk) : -1;
  for (const msa::PrefillPath path :
       {msa::PrefillPath::kTileUnion, msa::PrefillPath::kAuto, msa::PrefillPath::kBlockMajor}) {
    c.cu.upload(c.w.cu_seqlens_q);  // plan() sees the valid batch
    c.kl.upload(c.w.k_len);
    c.topk.upload(c.w.topk);
    msa::SparsePrefill op(spec.shape, cuda_options(false, path));
    op.plan(c.a.batch, c.a.topk, c.max_k_len, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    c.cu.upload(cu);
    c.kl.upload(kl);
    c.topk.upload(rows);
    for (int rep = 0; rep < 20; ++rep) op.run(c.a, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaGetLastError());
  }
}

// The split small calls (PrefillPath::kAuto without a plan: the union kernel's tiles split over
// their unions, then the combine; prefill_split_union at 16 queries, prefill_split_wide at 32)
// on a device batch changed after plan(): the batch of the test above (cu_seqlens_q out of order
// and past total_q, a k_len below its q_len, top-k rows [0, 1, -1, ...]), and requests 0 and 2
// overlapping (cu_seqlens_q [0, T, 0, T, T]). Results are unspecified; every run ends without a
// CUDA error, and compute-sanitizer memcheck over HostileCuda makes any stray access fail.
TEST(HostileCuda, SplitSmallCallsStayInBoundsOnBrokenDeviceBatches) {
  MSA_SKIP_WITHOUT_GPU();
  for (const int per : {4, 8}) {
    WorkloadSpec spec = spec_of(128, {{per, 16000}, {per, 200}, {per, 200}, {per, 64}}, 47);
    spec.shape = {.h_q = 64, .h_kv = 4, .d = 128, .topk = 16};
    DeviceCase c(spec);
    const std::int64_t total = 4 * per;
    // The route plan() takes (as cuda/api/prefill.cpp decides it, from the device batch's bound).
    ASSERT_EQ(msa::cuda::choose_prefill_route(spec.shape, msa::PrefillPath::kAuto, true, nullptr, nullptr, 4, total,
                                              c.max_k_len)
                  .route,
              msa::cuda::PrefillRoute::kSplit)
        << per;
    HostTensor rows(msa::DType::kInt32, c.w.topk.shape());
    auto* r = rows.data<std::int32_t>();
    for (std::int64_t i = 0; i < rows.numel(); ++i)
      r[i] = i % spec.shape.topk < 2 ? static_cast<std::int32_t>(i % spec.shape.topk) : -1;
    const auto t = static_cast<std::int32_t>(total);
    const std::vector<std::vector<std::int32_t>> broken_cu = {{0, 17000, 192, 0, 1}, {0, t, 0, t, t}};
    const std::vector<std::vector<std::int32_t>> broken_kl = {{16000, 200, 200, 1}, {16000, 200, 200, 64}};
    for (std::size_t k = 0; k < broken_cu.size(); ++k) {
      HostTensor cu(msa::DType::kInt32, {5}), kl(msa::DType::kInt32, {4});
      std::memcpy(cu.raw(), broken_cu[k].data(), 5 * sizeof(std::int32_t));
      std::memcpy(kl.raw(), broken_kl[k].data(), 4 * sizeof(std::int32_t));
      c.cu.upload(c.w.cu_seqlens_q);  // plan() sees the valid batch
      c.kl.upload(c.w.k_len);
      c.topk.upload(c.w.topk);
      msa::SparsePrefill op(spec.shape, cuda_options(false));
      op.plan(c.a.batch, c.a.topk, c.max_k_len, nullptr);
      CUDA_OK(cudaDeviceSynchronize());
      c.cu.upload(cu);
      c.kl.upload(kl);
      if (k == 0) c.topk.upload(rows);
      for (int rep = 0; rep < 20; ++rep) op.run(c.a, nullptr);
      CUDA_OK(cudaDeviceSynchronize()) << per << " " << k;
      CUDA_OK(cudaGetLastError());
    }
  }
}

// Requests that overlap on the device when plan() reads them (cu_seqlens_q [0, T, 0, T]: requests 0
// and 2 both hold queries [0, T)): the device planner counts those queries twice, more edges
// than a head has room for. Every work item stays inside its head's edges (checked on the
// plan's snapshot: at T = 2048, the fused planner path, head 0's items once ran past them into
// head 1's words), and the block-major kernel stores no row whose slot lies past the partials;
// results are unspecified, the run ends without a CUDA error. T = 8192 takes the general path
// (whose unit cap keeps the edges within bounds here), run for the same guarantees.
TEST(HostileCuda, RequestsOverlappingOnTheDeviceStayInBounds) {
  MSA_SKIP_WITHOUT_GPU();
  for (const int t : {2048, 8192}) {
    DeviceCase c(spec_of(128, {{t, 8192}, {0, 8192}, {0, 8192}}, 43));
    HostTensor cu(msa::DType::kInt32, {4});
    const std::int32_t overlapping[] = {0, t, 0, t};
    std::memcpy(cu.raw(), overlapping, sizeof overlapping);
    c.cu.upload(cu);
    const std::int64_t edges_per_head = c.w.total_q * c.w.spec.shape.topk;
    for (const msa::PrefillPath path : {msa::PrefillPath::kBlockMajor, msa::PrefillPath::kAuto}) {
      const std::string what = "T = " + std::to_string(t) + ", " + msa::prefill_path_name(path);
      msa::SparsePrefill op(c.w.spec.shape, cuda_options(false, path));
      op.plan(c.a.batch, c.a.topk, c.max_k_len, nullptr);
      const msa::K2qCsr plan = op.plan_snapshot();
      for (const msa::WorkItem& item : plan.work) {
        ASSERT_TRUE(item.q_begin >= 0 && item.q_count >= 0 && item.q_begin + item.q_count <= edges_per_head)
            << what << ": item of head " << item.kv_head << " row " << item.row << " covers edges [" << item.q_begin
            << ", " << item.q_begin + item.q_count << ") of " << edges_per_head;
      }
      op.run(c.a, nullptr);
      CUDA_OK(cudaDeviceSynchronize()) << what;
      CUDA_OK(cudaGetLastError());
    }
  }
}

// An empty device batch (B = 0: cu_seqlens_q [0], k_len and top-k with no element, their data
// null as an empty framework tensor's may be) planned with a positive bound on k_len, as an engine
// step without prefill tokens may be: plan() reads no k_len (it read k_len[0] through the null
// pointer: an illegal address).
TEST(HostileCuda, EmptyDeviceBatchWithABoundPlans) {
  MSA_SKIP_WITHOUT_GPU();
  const msa::AttentionShape s{.h_q = 16, .h_kv = 2, .d = 128, .topk = 8};
  HostTensor zero(msa::DType::kInt32, {1});
  zero.data<std::int32_t>()[0] = 0;
  DeviceTensor cu(zero);
  const msa::VarlenBatch batch{cu.view,
                               msa::TensorView::contiguous(nullptr, msa::DType::kInt32, {0}, msa::Device::kCuda)};
  const msa::TensorView topk =
      msa::TensorView::contiguous(nullptr, msa::DType::kInt32, {s.h_kv, 0, s.topk}, msa::Device::kCuda);
  for (const msa::PrefillPath path : {msa::PrefillPath::kAuto, msa::PrefillPath::kBlockMajor}) {
    msa::SparsePrefill op(s, cuda_options(false, path));
    EXPECT_NO_THROW(op.plan(batch, topk, 1024, nullptr)) << msa::prefill_path_name(path);
    CUDA_OK(cudaDeviceSynchronize()) << msa::prefill_path_name(path);
    CUDA_OK(cudaGetLastError());
  }
}

// Without a visible GPU (CI, or CUDA_VISIBLE_DEVICES=""): sizing works, constructing says why.
TEST(HostileCuda, NoVisibleGpuIsNamedAndSizingStillWorks) {
  msa::AttentionShape s;
  const std::size_t bytes =
      msa::SparsePrefill::workspace_bytes(s, {.batch = 4, .total_q = 4096, .max_k_len = 65536}, cuda_options(false));
  EXPECT_GT(bytes, std::size_t{4096} * 16 * 64 * 128 * 2);  // at least the bf16 partials
  if (msa::cuda_available()) GTEST_SKIP() << "a CUDA device is visible";
  expect_error([&] { msa::SparsePrefill op(s, cuda_options(false)); }, "options.backend", "cuda");
}

}  // namespace
