// Hostile input against the public API (CPU backend): each case is one of the ways a fuzzing
// user broke the library (issue "hostile input"). Bad input is an msa::Error naming the argument
// and the value before any output is touched; nothing reads or writes out of bounds; no NaN.
#include <gtest/gtest.h>

#include <chrono>
#include <climits>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench/workload.h"
#include "core/validate.h"
#include "cpu/parallel.h"
#include "cpu/reference.h"
#include "msa/msa.h"
#include "tests/support/compare.h"
#include "tests/support/expect_error.h"
#include "tests/support/host_tensor.h"
#include "tests/support/poison.h"

namespace {

using msa::DType;
using msa::bench::HostTensor;
using msa::test::any_nan;
using msa::test::copy_of;
using msa::test::expect_error;
using msa::test::int_tensor;
using msa::test::kSentinel;
using msa::test::untouched;

msa::AttentionShape small_shape() {
  msa::AttentionShape s;
  s.h_q = 4;
  s.h_kv = 2;
  s.topk = 4;
  return s;
}

// A paged (16-token pages) workload with outputs filled with the sentinel.
struct Case {
  msa::bench::Workload w;
  HostTensor out, lse;
  msa::PrefillArgs args;

  explicit Case(std::vector<msa::bench::Request> requests, bool sinks = false, int page_size = 16) {
    msa::bench::WorkloadSpec spec;
    spec.shape = small_shape();
    spec.requests = std::move(requests);
    spec.page_size = page_size;
    spec.sinks = sinks;
    spec.seed = 11;
    w = msa::bench::make_workload(spec);
    out = HostTensor(DType::kBF16, {w.total_q, spec.shape.h_q, 128});
    lse = HostTensor(DType::kFP32, {w.total_q, spec.shape.h_q});
    reset();
  }
  void reset() {
    out.fill(kSentinel);
    lse.fill(kSentinel);
    args = w.prefill_args(out, lse);
  }
};

// ---- 1. plan/run mismatch ---------------------------------------------------------------

TEST(HostileInput, RunWithAnotherBatchThanPlannedIsRejected) {
  Case c({{2, 8}, {8, 8}});  // cu_seqlens_q = [0, 2, 10], k_len = [8, 8]
  msa::SparsePrefill op(c.w.spec.shape);
  op.plan(c.w.batch(), c.w.topk.view());
  // Same B and total_q, other offsets: the plan's partial rows would land out of bounds.
  HostTensor cu = int_tensor({0, 8, 10});
  c.args.batch.cu_seqlens_q = cu.view();
  expect_error([&] { op.run(c.args); }, "cu_seqlens_q[1]", "8");
  EXPECT_TRUE(untouched(c.out) && untouched(c.lse));

  c.reset();
  HostTensor kl = int_tensor({8, 9});
  c.args.batch.k_len = kl.view();
  expect_error([&] { op.run(c.args); }, "k_len[1]", "9");
  EXPECT_TRUE(untouched(c.out) && untouched(c.lse));

  c.reset();
  HostTensor topk = copy_of(c.w.topk);
  topk.data<std::int32_t>()[(1 * 10 + 3) * 4 + 0] = -1;  // head 1, query 3, slot 0
  c.args.topk = topk.view();
  expect_error([&] { op.run(c.args); }, "topk[1, 3, 0]", "-1");
  EXPECT_TRUE(untouched(c.out) && untouched(c.lse));

  c.reset();  // the planned inputs still run
  op.run(c.args);
  EXPECT_FALSE(untouched(c.out));
}

// ---- 2. batch vectors are layout-checked ------------------------------------------------

TEST(HostileInput, BatchVectorStridesAlignmentAndExtents) {
  Case c({{3, 300}, {1, 1}});
  HostTensor kl = int_tensor({0, 0, 300, 1, 0, 0});
  const auto plan_with = [&](msa::TensorView k_len) {
    msa::SparsePrefill op(c.w.spec.shape);
    msa::VarlenBatch b = c.w.batch();
    b.k_len = k_len;
    op.plan(b, c.w.topk.view());
  };
  msa::TensorView v = kl.view();
  v.data = kl.data<std::int32_t>() + 2;
  v.shape[0] = 2;
  v.stride[0] = -1;  // would read before the buffer
  expect_error([&] { plan_with(v); }, "k_len.stride[0]", "-1");
  v.stride[0] = 0;  // [300, 300]: two 300-token requests out of [300, 1]
  expect_error([&] { plan_with(v); }, "k_len.stride[0]", "0");
  v.stride[0] = 1;
  v.data = reinterpret_cast<char*>(kl.data<std::int32_t>() + 2) + 2;  // misaligned by 2 bytes
  expect_error([&] { plan_with(v); }, "k_len.data", std::to_string(reinterpret_cast<std::uintptr_t>(v.data)));
  v.data = kl.data<std::int32_t>() + 2;
  v.shape[0] = -1;
  expect_error([&] { plan_with(v); }, "k_len.shape[0]", "-1");
  // The same rules for decode's seq_len.
  msa::DecodeArgs d;
  d.seq_len = kl.view();
  d.seq_len.stride[0] = 0;
  expect_error([&] { msa::read_decode_batch(d.seq_len, 1); }, "seq_len.stride[0]", "0");
}

// ---- 3. ranks beyond kMaxRank -------------------------------------------------------------

TEST(HostileInput, InvalidRanksAreNamedNotFormatted) {
  Case c({{3, 40}});
  msa::SparsePrefill op(c.w.spec.shape);
  op.plan(c.w.batch(), c.w.topk.view());
  for (int rank : {1000, 5, -1}) {
    c.reset();
    c.args.q.rank = rank;
    expect_error([&] { op.run(c.args); }, "q.rank", std::to_string(rank));
    EXPECT_TRUE(untouched(c.out) && untouched(c.lse));
  }
  msa::TensorView t;
  t.rank = 1000;
  EXPECT_EQ(t.shape_string(), "[rank 1000]");
  // Found by the fuzzer: row-major strides of huge extents overflowed int64 in contiguous().
  const std::int64_t e = std::int64_t{1} << 40;
  expect_error([&] { msa::TensorView::contiguous(nullptr, DType::kFP32, {2, e, e, 128}); }, "shape",
               "[2, 1099511627776, 1099511627776, 128]");
  EXPECT_EQ(msa::TensorView::contiguous(nullptr, DType::kFP32, {e, e, 128}).numel(),
            std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(t.numel(), 0);
  EXPECT_FALSE(t.is_contiguous());
}

// ---- 4. no exception escapes an OpenMP region ----------------------------------------------

TEST(HostileInput, IndexHeadsBeyondTheLimitAreRejected) {
  expect_error([] { msa::Indexer op((1 << 24) + 1, 128); }, "h_i", "16777217");
}

TEST(HostileInput, ExceptionsInsideParallelRegionsReachTheCaller) {
  msa::cpu::ParallelErrors errors;
  int ran = 0;
#pragma omp parallel num_threads(2)
  {
#pragma omp for schedule(static, 1)
    for (int i = 0; i < 64; ++i) errors.run([&] {
      if (i == 5) throw std::length_error("vector::_M_default_append");
#pragma omp atomic
      ++ran;
    });
  }
  EXPECT_THROW(errors.rethrow(), std::length_error);
  EXPECT_LT(ran, 64);
}

// ---- 5. the longest supported sequence ----------------------------------------------------

TEST(HostileInput, LengthsBeyondKMaxKvLenAreRejectedByName) {
  Case c({{1, 40}});
  HostTensor kl = int_tensor({INT_MAX});
  msa::VarlenBatch b = c.w.batch();
  b.k_len = kl.view();
  msa::SparsePrefill op(c.w.spec.shape);
  expect_error([&] { op.plan(b, c.w.topk.view()); }, "k_len[0]", std::to_string(INT_MAX));
  kl.data<std::int32_t>()[0] = static_cast<std::int32_t>(msa::kMaxKvLen) + 1;
  expect_error([&] { op.plan(b, c.w.topk.view()); }, "k_len[0]", std::to_string(msa::kMaxKvLen + 1));
  // Decode: seq_len = [INT_MAX] used to return out = 0, lse = -inf silently.
  HostTensor sl = int_tensor({INT_MAX});
  expect_error([&] { msa::read_decode_batch(sl.view(), 1); }, "seq_len[0]", std::to_string(INT_MAX));
}

// ---- 6. shapes before allocations -------------------------------------------------------

TEST(HostileInput, ShapesAreCheckedBeforeAnyLargeAllocation) {
  // 128 requests of 2^24 - 1 queries against a one-row index_q: the shape error must come at
  // once, not after building per-query tables of 2^31 rows.
  std::vector<std::int32_t> cu(129), kl(128, (1 << 24) - 1);
  for (int b = 0; b <= 128; ++b) cu[b] = b * ((1 << 24) - 1);
  HostTensor cu_t = int_tensor(cu), kl_t = int_tensor(kl);
  HostTensor index_q(DType::kBF16, {1, 1, 128}), index_k(DType::kBF16, {1, 1, 16, 128}),
      pt(DType::kInt32, {128, 1}), scores(DType::kFP32, {1, 1, 1});
  msa::IndexerArgs a;
  a.index_q = index_q.view();
  a.index_k.k = index_k.view();
  a.index_k.page_table = pt.view();
  a.batch = {cu_t.view(), kl_t.view()};
  a.scores = scores.view();
  msa::Indexer op(1, 128);
  const auto t0 = std::chrono::steady_clock::now();
  expect_error([&] { op.run(a); }, "index_q.shape[0]", "1");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
}

// ---- 7. 64-bit sizes ----------------------------------------------------------------------

TEST(HostileInput, DecodeRowsBeyondInt32AreRejected) {
  // B = 2^28 requests of Q = 16: B * Q wrapped to 0 in int32 and a q of zero rows passed. The
  // device path checks metadata only, so the claimed extent is enough to reach the product.
  msa::DecodeArgs d;
  HostTensor one = int_tensor({64});
  d.seq_len = one.view();
  d.seq_len.shape[0] = std::int64_t{1} << 28;
  d.seq_len.device = msa::Device::kCuda;
  HostTensor q(DType::kBF16, {0, 4, 128});
  d.q = q.view();
  d.q.device = msa::Device::kCuda;
  d.q_per_request = 16;
  expect_error([&] { msa::validate_decode(small_shape(), d, {}, msa::Device::kCuda); }, "seq_len.shape[0]",
               std::to_string(std::int64_t{1} << 28));
  msa::SparseDecode op(small_shape());
  expect_error([&] { op.plan(std::int64_t{1} << 28, 16, 64); }, "batch", std::to_string(std::int64_t{1} << 28));
}

// ---- 8. workspace alignment --------------------------------------------------------------

TEST(HostileInput, MisalignedWorkspaceIsRejected) {
  std::vector<char> buf(1 << 16);
  char* aligned = buf.data() + (256 - reinterpret_cast<std::uintptr_t>(buf.data()) % 256) % 256;
  msa::SparsePrefill prefill(small_shape());
  expect_error([&] { prefill.set_workspace(aligned + 1, 1024); }, "workspace.data",
               std::to_string(reinterpret_cast<std::uintptr_t>(aligned + 1)));
  EXPECT_NO_THROW(prefill.set_workspace(aligned, 1024));
  msa::SparseDecode decode(small_shape());
  expect_error([&] { decode.set_workspace(aligned + 4, 1024); }, "workspace.data",
               std::to_string(reinterpret_cast<std::uintptr_t>(aligned + 4)));
}

// ---- 9. no undefined behaviour on paths that reject -----------------------------------------

TEST(HostileInput, OverflowingValuesAreRejectedWithoutOverflow) {
  Case c({{1, 40}, {0, 40}});
  HostTensor cu = int_tensor({0, 1, INT_MIN});
  msa::VarlenBatch b = c.w.batch();
  b.cu_seqlens_q = cu.view();
  msa::SparsePrefill op(c.w.spec.shape);
  expect_error([&] { op.plan(b, c.w.topk.view()); }, "cu_seqlens_q[2]", std::to_string(INT_MIN));

  msa::TensorView huge;
  huge.rank = 3;
  huge.shape = {std::int64_t{1} << 40, std::int64_t{1} << 40, 128, 0};
  EXPECT_EQ(huge.numel(), std::numeric_limits<std::int64_t>::max());

  const std::int64_t big = std::int64_t{1} << 40;
  expect_error([&] { msa::k2q_sizes(small_shape(), {big, 0, big}, 64); }, "problem.batch", std::to_string(big));
  expect_error([&] { msa::SparsePrefill::workspace_bytes(small_shape(), {-1, -1, -1}); }, "problem.batch", "-1");
  expect_error([&] { msa::SparseDecode::workspace_bytes(small_shape(), {1, -1, 0}); }, "problem.total_q", "-1");
  // Within the limits, a plan whose capacity would not fit int32 is named too.
  expect_error([&] { msa::k2q_sizes(small_shape(), {1 << 30, 0, 1 << 30}, 64); }, "problem.max_k_len",
               std::to_string(1 << 30));
}

// ---- 10. sinks and extreme values -----------------------------------------------------------

// Runs prefill (plan + run) and decode (the same requests, q_len = Q each) on one workload.
struct BothOperators {
  HostTensor out_p, lse_p, out_d, lse_d;

  void run(const msa::bench::Workload& w, const msa::TensorView& sinks, int q_per_request,
           const msa::Options& options = {}) {
    out_p = HostTensor(DType::kBF16, {w.total_q, w.spec.shape.h_q, 128});
    lse_p = HostTensor(DType::kFP32, {w.total_q, w.spec.shape.h_q});
    out_d = HostTensor(DType::kBF16, {w.total_q, w.spec.shape.h_q, 128});
    lse_d = HostTensor(DType::kFP32, {w.total_q, w.spec.shape.h_q});
    msa::PrefillArgs p = w.prefill_args(out_p, lse_p);
    p.sinks = sinks;
    msa::SparsePrefill prefill(w.spec.shape, options);
    prefill.plan(p.batch, p.topk);
    prefill.run(p);
    msa::DecodeArgs d;
    d.q = p.q;
    d.kv = p.kv;
    d.seq_len = p.batch.k_len;
    d.topk = p.topk;
    d.topk_head_major = true;
    d.q_per_request = q_per_request;
    d.sinks = sinks;
    d.out = out_d.view();
    d.lse = lse_d.view();
    msa::SparseDecode decode(w.spec.shape, options);
    decode.plan(static_cast<std::int64_t>(w.spec.requests.size()), q_per_request, 4096);
    decode.run(d);
  }
};

// |a - b| <= tol + tol |b| elementwise, identical +-inf positions, no NaN (no cosine test).
void expect_close(const HostTensor& a, const HostTensor& b, float tol, const char* what) {
  EXPECT_TRUE(msa::test::close(a, b, {tol, tol, -1.0})) << what;
}

TEST(HostileInput, NonFiniteSinksAreIgnoredAlikeByDecodeAndPrefill) {
  msa::bench::WorkloadSpec spec;
  spec.shape = small_shape();
  spec.requests = {{4, 300}, {4, 4}};
  spec.page_size = 32;
  spec.sinks = true;
  spec.seed = 5;
  msa::bench::Workload w = msa::bench::make_workload(spec);
  BothOperators none;
  none.run(w, {}, 4);
  for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    HostTensor sinks = copy_of(w.sinks);
    for (std::int64_t h = 0; h < sinks.numel(); ++h) sinks.set(h, bad);
    BothOperators r;
    r.run(w, sinks.view(), 4);
    EXPECT_FALSE(any_nan(r.out_p) || any_nan(r.lse_p) || any_nan(r.out_d) || any_nan(r.lse_d)) << bad;
    expect_close(r.out_p, none.out_p, 0.f, "prefill out");  // exactly as without sinks
    expect_close(r.lse_p, none.lse_p, 0.f, "prefill lse");
    expect_close(r.out_d, none.out_d, 0.f, "decode out");
    expect_close(r.lse_d, none.lse_d, 0.f, "decode lse");
    expect_close(r.out_d, r.out_p, 1e-2f, "decode vs prefill out");
    expect_close(r.lse_d, r.lse_p, 1e-3f, "decode vs prefill lse");
  }
  // Strict mode rejects them by name.
  HostTensor sinks = copy_of(w.sinks);
  sinks.set(2, std::nanf(""));
  msa::Options strict;
  strict.strict = true;
  BothOperators r;
  expect_error([&] { r.run(w, sinks.view(), 4, strict); }, "sinks[2]", "nan");
}

TEST(HostileInput, OverflowingScoresSaturateAndNeverGiveNaN) {
  msa::bench::WorkloadSpec spec;
  spec.shape = small_shape();
  spec.requests = {{2, 200}};
  spec.page_size = 64;
  spec.selection = msa::bench::Selection::kAll;
  spec.seed = 9;
  msa::bench::Workload w = msa::bench::make_workload(spec);
  // Query 1 (position 199), head 0 (KV head 0): q = +1e30 everywhere; key 150 of KV head 0 = +1e30
  // and key 20 = -1e30. Their scores overflow FP32 (+-inf) and saturate to +-2^126: all weight on
  // key 150, none on key 20.
  for (int j = 0; j < 128; ++j) w.q.set((1 * 4 + 0) * 128 + j, 1e30f);
  const auto set_key = [&](std::int64_t t, float v) {
    const std::int32_t page = w.page_table.data<std::int32_t>()[t / 64];
    for (int j = 0; j < 128; ++j) w.k.set(((page * 2 + 0) * 64 + t % 64) * 128 + j, v);
  };
  set_key(150, 1e30f);
  set_key(20, -1e30f);
  BothOperators r;
  r.run(w, {}, 2);
  EXPECT_FALSE(any_nan(r.out_p) || any_nan(r.lse_p) || any_nan(r.out_d) || any_nan(r.lse_d));
  expect_close(r.out_d, r.out_p, 1e-2f, "decode vs prefill out");
  const std::int32_t page = w.page_table.data<std::int32_t>()[150 / 64];
  for (int j = 0; j < 128; ++j) {
    const float v150 = w.v.get(((page * 2 + 0) * 64 + 150 % 64) * 128 + j);
    EXPECT_NEAR(r.out_p.get((1 * 4 + 0) * 128 + j), v150, 1e-2f + 1e-2f * std::fabs(v150)) << j;
  }
  EXPECT_TRUE(std::isfinite(r.lse_p.get(1 * 4 + 0)));
  EXPECT_TRUE(std::isfinite(r.lse_d.get(1 * 4 + 0)));
  // The FP64 oracle follows the same rule.
  HostTensor out_g(DType::kBF16, {w.total_q, 4, 128}), lse_g(DType::kFP32, {w.total_q, 4});
  msa::cpu::sparse_prefill_gather(w.spec.shape, w.prefill_args(out_g, lse_g));
  expect_close(out_g, r.out_p, 1e-2f, "oracle vs prefill out");
}

// Found while fuzzing: decode's lazy rescale lets a weight reach 2^8; times a finite bf16 V of
// 3e38 that overflowed FP32, and the next block's rescale by 0 made inf * 0 = NaN.
TEST(HostileInput, LargeValuesUnderTheLazyRescaleStayFinite) {
  msa::bench::WorkloadSpec spec;
  spec.shape = small_shape();
  spec.requests = {{1, 300}};  // one query at position 299: blocks 0, 1, 2 (local)
  spec.page_size = 64;
  spec.selection = msa::bench::Selection::kAll;
  spec.seed = 13;
  msa::bench::Workload w = msa::bench::make_workload(spec);
  const float scale = w.spec.shape.softmax_scale();
  for (int j = 0; j < 128; ++j) w.q.set(j, j == 0 ? 1.f : 0.f);  // query 0, head 0 (KV head 0)
  const auto at = [&](std::int64_t t, int j) {
    const std::int32_t page = w.page_table.data<std::int32_t>()[t / 64];
    return ((page * 2 + 0) * 64 + t % 64) * 128 + j;
  };
  w.k.set(at(200, 0), 3.f / scale);    // block 1: score 3, weight 2^4.3 under the lazy max
  w.v.set(at(200, 0), 3e38f);          // that weight times 3e38 overflows FP32
  w.k.set(at(280, 0), 200.f / scale);  // block 2: score 200, the old max rescaled by 0
  BothOperators r;
  r.run(w, {}, 1);
  EXPECT_FALSE(any_nan(r.out_d) || any_nan(r.lse_d) || any_nan(r.out_p) || any_nan(r.lse_p));
  for (int j = 0; j < 128; ++j) {
    const float v = w.v.get(at(280, j));
    EXPECT_NEAR(r.out_d.get(j), v, 1e-2f + 1e-2f * std::fabs(v)) << j;
    EXPECT_NEAR(r.out_p.get(j), v, 1e-2f + 1e-2f * std::fabs(v)) << j;
  }
}

// ---- 11. moved-from objects, enums, which argument is named -----------------------------------

TEST(HostileInput, MovedFromOperatorsSayWhy) {
  Case c({{3, 40}});
  msa::SparsePrefill a(c.w.spec.shape);
  msa::SparsePrefill b = std::move(a);
  expect_error([&] { a.plan(c.w.batch(), c.w.topk.view()); }, "SparsePrefill", "moved-from");  // NOLINT(bugprone-use-after-move)
  EXPECT_NO_THROW(b.plan(c.w.batch(), c.w.topk.view()));
  msa::SparseDecode d(small_shape());
  msa::SparseDecode d2 = std::move(d);
  expect_error([&] { d.plan(1, 1, 64); }, "SparseDecode", "moved-from");  // NOLINT(bugprone-use-after-move)
}

TEST(HostileInput, InvalidEnumsAreNamedByValue) {
  msa::Options o;
  o.backend = static_cast<msa::Backend>(7);
  expect_error([&] { msa::SparsePrefill op(small_shape(), o); }, "options.backend", "7");
  expect_error([&] { msa::Combine op(small_shape(), o); }, "options.backend", "7");
  EXPECT_STREQ(msa::backend_name(static_cast<msa::Backend>(7)), "unknown");
  o = {};
  o.prefill_path = static_cast<msa::PrefillPath>(9);
  expect_error([&] { msa::SparsePrefill op(small_shape(), o); }, "options.prefill_path", "9");
}

TEST(HostileInput, TheMeantArgumentIsNamed) {
  Case c({{3, 40}});
  msa::SparsePrefill op(c.w.spec.shape);
  op.plan(c.w.batch(), c.w.topk.view());
  msa::PrefillArgs a = c.args;
  a.kv.page_table = {};  // a paged cache without its page table
  expect_error([&] { op.run(a); }, "page_table", "absent");
  // q with d = 129 is a wrong extent, not a wrong stride.
  std::vector<std::uint16_t> q129(3 * 4 * 129 + 8);
  a = c.args;
  a.q = msa::TensorView::contiguous(q129.data(), DType::kBF16, {3, 4, 129});
  expect_error([&] { op.run(a); }, "q.shape[2]", "129");
  EXPECT_TRUE(untouched(c.out) && untouched(c.lse));
}

TEST(HostileInput, OverlappingOutputsAreRejected) {
  Case c({{3, 40}});
  msa::SparsePrefill op(c.w.spec.shape);
  op.plan(c.w.batch(), c.w.topk.view());
  msa::PrefillArgs a = c.args;
  a.out.stride[0] = 0;  // every query row onto one
  expect_error([&] { op.run(a); }, "out.stride[0]", "0");
  a = c.args;
  a.lse.stride[0] = 2;  // rows of 4 heads two apart overlap
  expect_error([&] { op.run(a); }, "lse.stride[0]", "2");
  EXPECT_TRUE(untouched(c.out) && untouched(c.lse));
}

}  // namespace
