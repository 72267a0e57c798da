// Argument validation (spec §8): every bad input is an msa::Error naming the argument and the
// value, raised before any output is written.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "bench/workload.h"
#include "core/validate.h"
#include "msa/msa.h"
#include "tests/support/expect_error.h"
#include "tests/support/host_tensor.h"

namespace {

using msa::DType;
using msa::bench::HostTensor;

constexpr float kSentinel = 7.f;

using msa::test::expect_error;

HostTensor sentinel_tensor(DType dtype, std::vector<std::int64_t> shape) {
  HostTensor t(dtype, std::move(shape));
  t.fill(kSentinel);
  return t;
}

bool untouched(const HostTensor& t) { return msa::test::all_equal(t, kSentinel); }

using msa::test::copy_of;

msa::AttentionShape small_shape() {
  msa::AttentionShape s;
  s.h_q = 8;
  s.h_kv = 2;
  s.topk = 4;
  return s;
}

msa::bench::WorkloadSpec small_spec(int page_size) {
  msa::bench::WorkloadSpec spec;
  spec.shape = small_shape();
  // total_q = 8; request 0 spans 10 pages of 32, requests 1 and 2 one page each.
  spec.requests = {{5, 300}, {0, 17}, {3, 3}};
  spec.page_size = page_size;
  spec.sinks = true;
  spec.seed = 3;
  return spec;
}

// ---- attention shape -------------------------------------------------------------------

void expect_shape_rejected(const msa::AttentionShape& s, const std::string& argument,
                           const std::string& value) {
  expect_error([&] { msa::validate_shape(s); }, argument, value);
  expect_error([&] { msa::SparsePrefill op(s, {}); }, argument, value);
}

TEST(ShapeValidation, ValidShapesPass) {
  for (auto [h_q, h_kv] : {std::pair{4, 4}, std::pair{64, 4}, std::pair{16, 1}}) {
    msa::AttentionShape s;
    s.h_q = h_q;
    s.h_kv = h_kv;
    EXPECT_NO_THROW(msa::validate_shape(s));
  }
}
TEST(ShapeValidation, HeadsNotDivisible) {
  msa::AttentionShape s = small_shape();
  s.h_q = 7;
  expect_shape_rejected(s, "shape.h_q", "7");
}
TEST(ShapeValidation, GroupAbove16) {
  msa::AttentionShape s = small_shape();
  s.h_q = 34;
  expect_shape_rejected(s, "shape.h_q / shape.h_kv", "17");
}
TEST(ShapeValidation, UnsupportedHeadDim) {
  msa::AttentionShape s = small_shape();
  s.d = 64;
  expect_shape_rejected(s, "shape.d", "64");
  try {
    msa::validate_shape(s);
  } catch (const msa::Error& e) {
    EXPECT_NE(e.message().find("unsupported head dim"), std::string::npos);
  }
}
TEST(ShapeValidation, TopkOutOfRange) {
  msa::AttentionShape s = small_shape();
  s.topk = 0;
  expect_shape_rejected(s, "shape.topk", "0");
  s.topk = 33;
  expect_shape_rejected(s, "shape.topk", "33");
}

// ---- sparse prefill --------------------------------------------------------------------

class PrefillValidation : public ::testing::Test {
 protected:
  void SetUp() override { load(32); }

  void load(int page_size, bool token_major = false) {
    auto spec = small_spec(page_size);
    spec.token_major_pages = token_major;
    w = msa::bench::make_workload(spec);
    out = sentinel_tensor(DType::kBF16, {w.total_q, 8, 128});
    lse = sentinel_tensor(DType::kFP32, {w.total_q, 8});
    args = w.prefill_args(out, lse);
  }

  // The public object, planned on the valid batch and top-k, rejects `a` in run() and leaves
  // out and lse as they were.
  void expect_rejected(const msa::PrefillArgs& a, const std::string& argument,
                       const std::string& value, bool strict = false) {
    msa::Options o;
    o.strict = strict;
    msa::SparsePrefill op(w.spec.shape, o);
    op.plan(w.batch(), w.topk.view());
    expect_error([&] { op.run(a); }, argument, value);
    EXPECT_TRUE(untouched(out)) << "out was written";
    EXPECT_TRUE(untouched(lse)) << "lse was written";
  }

  void expect_valid(const msa::PrefillArgs& a) {
    msa::Options strict;
    strict.strict = true;
    EXPECT_NO_THROW(msa::validate_prefill(w.spec.shape, a, {}, msa::Device::kCpu));
    EXPECT_NO_THROW(msa::validate_prefill(w.spec.shape, a, strict, msa::Device::kCpu));
  }

  msa::bench::Workload w;
  HostTensor out, lse;
  msa::PrefillArgs args;
};

TEST_F(PrefillValidation, ValidInputsPass) {
  expect_valid(args);
  msa::PrefillArgs a = args;
  a.lse = {};
  a.sinks = {};
  expect_valid(a);
  load(128, /*token_major=*/true);
  expect_valid(args);
  load(0);  // flat
  expect_valid(args);
}
TEST_F(PrefillValidation, SentinelSeesAWrite) {
  // The control for every "untouched" check below: a valid run does overwrite out and lse.
  msa::SparsePrefill op(w.spec.shape);
  op.plan(w.batch(), w.topk.view());
  op.run(args);
  EXPECT_FALSE(untouched(out));
  EXPECT_FALSE(untouched(lse));
}
TEST_F(PrefillValidation, QWrongDtype) {
  args.q.dtype = DType::kFP32;
  expect_rejected(args, "q.dtype", "fp32");
}
TEST_F(PrefillValidation, QWrongRank) {
  args.q.rank = 2;
  expect_rejected(args, "q.rank", "2 [8, 8]");
}
TEST_F(PrefillValidation, QWrongShape) {
  msa::PrefillArgs a = args;
  a.q.shape[1] = 4;
  expect_rejected(a, "q.shape[1]", "4");
  a = args;
  a.q.shape[0] = 7;
  expect_rejected(a, "q.shape[0]", "7");
}
TEST_F(PrefillValidation, QNonContiguousLastDim) {
  args.q.stride[2] = 2;
  expect_rejected(args, "q.stride[2]", "2");
}
TEST_F(PrefillValidation, QMisaligned) {
  args.q.data = static_cast<char*>(args.q.data) + 2;
  expect_rejected(args, "q.data", std::to_string(reinterpret_cast<std::uintptr_t>(args.q.data)));
}
TEST_F(PrefillValidation, TensorOnWrongDevice) {
  args.kv.k.device = msa::Device::kCuda;
  expect_rejected(args, "k.device", "cuda");
}
TEST_F(PrefillValidation, KLenShorterThanQLen) {
  HostTensor k_len = copy_of(w.k_len);
  k_len.data<std::int32_t>()[2] = 2;  // q_len 3
  args.batch.k_len = k_len.view();
  expect_rejected(args, "k_len[2]", "2");
}
TEST_F(PrefillValidation, CuSeqlensQNotStartingAtZero) {
  HostTensor cu = copy_of(w.cu_seqlens_q);
  cu.data<std::int32_t>()[0] = 1;
  args.batch.cu_seqlens_q = cu.view();
  expect_rejected(args, "cu_seqlens_q[0]", "1");
}
TEST_F(PrefillValidation, PageTableEntryOutOfRange) {
  w.page_table.data<std::int32_t>()[0 * 10 + 3] = 12;  // num_pages = 12
  expect_rejected(args, "page_table[0, 3]", "12");
  w.page_table.data<std::int32_t>()[0 * 10 + 3] = 0;
  w.page_table.data<std::int32_t>()[2 * 10 + 0] = -1;
  expect_rejected(args, "page_table[2, 0]", "-1");
}
TEST_F(PrefillValidation, UnusedPageTableEntriesAreNotChecked) {
  w.page_table.data<std::int32_t>()[1 * 10 + 5] = 9999;  // request 1 uses only page 0
  w.page_table.data<std::int32_t>()[2 * 10 + 9] = -3;
  expect_valid(args);
}
TEST_F(PrefillValidation, PageTableTooNarrow) {
  args.kv.page_table.shape[1] = 9;  // request 0 needs 10 pages
  expect_rejected(args, "page_table.shape[1]", "9");
}
TEST_F(PrefillValidation, PageTableWrongBatch) {
  args.kv.page_table.shape[0] = 2;
  expect_rejected(args, "page_table.shape[0]", "2");
}
TEST_F(PrefillValidation, PageSizeUnsupported) {
  args.kv.k.shape[2] = 48;
  args.kv.v.shape[2] = 48;
  expect_rejected(args, "k.shape[2]", "48");
}
TEST_F(PrefillValidation, KvHeadsMismatch) {
  args.kv.k.shape[1] = 1;
  expect_rejected(args, "k.shape[1]", "1");
}
TEST_F(PrefillValidation, KvDtypeMismatch) {
  args.kv.k.dtype = DType::kFP16;
  expect_rejected(args, "k.dtype", "fp16");
}
TEST_F(PrefillValidation, VShapeMismatch) {
  args.kv.v.shape[0] = 11;
  expect_rejected(args, "v.shape[0]", "11");
}
TEST_F(PrefillValidation, VStrideMismatch) {
  // The same buffer seen token-major: valid for k, but v must share k's strides.
  args.kv.v.stride[1] = 128;
  args.kv.v.stride[2] = 256;
  expect_rejected(args, "v.stride[1]", "128");
}
TEST_F(PrefillValidation, FlatCuSeqlensKNotCoveringKLen) {
  load(0);
  w.cu_seqlens_k.data<std::int32_t>()[1] = 299;  // request 0 has k_len 300
  expect_rejected(args, "cu_seqlens_k[1]", "299");
}
TEST_F(PrefillValidation, FlatCuSeqlensKBeyondTotalK) {
  load(0);
  args.kv.k.shape[0] = 319;  // cu_seqlens_k[3] = 320
  args.kv.v.shape[0] = 319;
  expect_rejected(args, "cu_seqlens_k[3]", "320");
}
TEST_F(PrefillValidation, PagedAndFlatTogether) {
  HostTensor cu_k(DType::kInt32, {4});
  args.kv.cu_seqlens_k = cu_k.view();
  expect_rejected(args, "cu_seqlens_k", "present");
}
TEST_F(PrefillValidation, OutWrongDtype) {
  args.out.dtype = DType::kFP16;
  expect_rejected(args, "out.dtype", "fp16");
}
TEST_F(PrefillValidation, OutWrongShape) {
  args.out.shape[2] = 64;
  expect_rejected(args, "out.shape[2]", "64");
}
TEST_F(PrefillValidation, LseWrongDtype) {
  args.lse.dtype = DType::kBF16;
  expect_rejected(args, "lse.dtype", "bf16");
}
TEST_F(PrefillValidation, LseWrongShape) {
  args.lse.shape[1] = 7;
  expect_rejected(args, "lse.shape[1]", "7");
}
TEST_F(PrefillValidation, SinksWrongShape) {
  HostTensor sinks(DType::kFP32, {9});
  args.sinks = sinks.view();
  expect_rejected(args, "sinks.shape[0]", "9");
}
TEST_F(PrefillValidation, SinksWrongDtype) {
  args.sinks.dtype = DType::kBF16;
  expect_rejected(args, "sinks.dtype", "bf16");
}
TEST_F(PrefillValidation, TopkWrongShape) {
  args.topk.shape[0] = 1;
  expect_rejected(args, "topk.shape[0]", "1");
}
TEST_F(PrefillValidation, TopkWrongDtype) {
  args.topk.dtype = DType::kFP32;
  expect_rejected(args, "topk.dtype", "fp32");
}
TEST_F(PrefillValidation, StrictContractAtPlanAndRun) {
  HostTensor bad = copy_of(w.topk);
  // Head 1, query 6 (request 2, local 0): a full row is [0, -1, -1, -1].
  bad.data<std::int32_t>()[(1 * 8 + 6) * 4 + 1] = 0;
  args.topk = bad.view();
  expect_rejected(args, "topk[1, 6, 1]", "0", /*strict=*/true);
  msa::Options strict;
  strict.strict = true;
  msa::SparsePrefill op(w.spec.shape, strict);
  expect_error([&] { op.plan(w.batch(), bad.view()); }, "topk[1, 6, 1]", "0");
  EXPECT_NO_THROW(msa::validate_prefill(w.spec.shape, args, {}, msa::Device::kCpu));
}
TEST_F(PrefillValidation, CudaDeviceChecksMetadataOnly) {
  HostTensor bad = copy_of(w.topk);
  bad.data<std::int32_t>()[0] = 77;  // strict breach, unreadable on a device
  w.page_table.data<std::int32_t>()[0] = -5;
  args.topk = bad.view();
  for (msa::TensorView* t :
       {&args.q, &args.kv.k, &args.kv.v, &args.kv.page_table, &args.batch.cu_seqlens_q,
        &args.batch.k_len, &args.topk, &args.sinks, &args.out, &args.lse})
    t->device = msa::Device::kCuda;
  msa::Options strict;
  strict.strict = true;
  EXPECT_NO_THROW(msa::validate_prefill(w.spec.shape, args, strict, msa::Device::kCuda));
  msa::PrefillArgs a = args;
  a.lse.device = msa::Device::kCpu;
  expect_error([&] { msa::validate_prefill(w.spec.shape, a, {}, msa::Device::kCuda); },
               "lse.device", "cpu");
  a = args;
  a.topk.shape[1] = 9;  // total_q comes from q.shape[0] = 8
  expect_error([&] { msa::validate_prefill(w.spec.shape, a, {}, msa::Device::kCuda); },
               "topk.shape[1]", "9");
  a = args;
  a.batch.cu_seqlens_q.shape[0] = 3;
  expect_error([&] { msa::validate_prefill(w.spec.shape, a, {}, msa::Device::kCuda); },
               "cu_seqlens_q.shape[0]", "3");
}

// ---- sparse decode ---------------------------------------------------------------------

class DecodeValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    auto spec = small_spec(64);
    spec.requests = {{2, 300}, {2, 2}, {2, 129}};  // Q = 2 per request, rows b * 2 + t
    w = msa::bench::make_workload(spec);
    out = sentinel_tensor(DType::kBF16, {6, 8, 128});
    lse = sentinel_tensor(DType::kFP32, {6, 8});
    query_major = HostTensor(DType::kInt32, {6, 2, 4});
    for (int q = 0; q < 6; ++q)
      for (int h = 0; h < 2; ++h)
        for (int s = 0; s < 4; ++s)
          query_major.data<std::int32_t>()[(q * 2 + h) * 4 + s] =
              w.topk.data<std::int32_t>()[(h * 6 + q) * 4 + s];
    args.q = w.q.view();
    args.kv = w.kv();
    args.seq_len = w.k_len.view();
    args.topk = query_major.view();
    args.q_per_request = 2;
    args.sinks = w.sinks.view();
    args.out = out.view();
    args.lse = lse.view();
  }

  void expect_rejected(const msa::DecodeArgs& a, const std::string& argument,
                       const std::string& value, bool strict = false) {
    msa::Options o;
    o.strict = strict;
    msa::SparseDecode op(w.spec.shape, o);
    op.plan(3, 2, 300);
    expect_error([&] { op.run(a); }, argument, value);
    expect_error([&] { msa::validate_decode(w.spec.shape, a, o, msa::Device::kCpu); }, argument,
                 value);
    EXPECT_TRUE(untouched(out));
    EXPECT_TRUE(untouched(lse));
  }

  msa::bench::Workload w;
  HostTensor out, lse, query_major;
  msa::DecodeArgs args;
};

TEST_F(DecodeValidation, ValidInputsPassInBothLayouts) {
  msa::Options strict;
  strict.strict = true;
  EXPECT_NO_THROW(msa::validate_decode(w.spec.shape, args, strict, msa::Device::kCpu));
  msa::DecodeArgs a = args;
  a.topk = w.topk.view();
  a.topk_head_major = true;
  EXPECT_NO_THROW(msa::validate_decode(w.spec.shape, a, strict, msa::Device::kCpu));
}
TEST_F(DecodeValidation, SeqLenShorterThanQ) {
  HostTensor seq = copy_of(w.k_len);
  seq.data<std::int32_t>()[1] = 1;
  args.seq_len = seq.view();
  expect_rejected(args, "seq_len[1]", "1");
}
TEST_F(DecodeValidation, QPerRequestOutOfRange) {
  args.q_per_request = 17;
  expect_error([&] { msa::validate_decode(w.spec.shape, args, {}, msa::Device::kCpu); },
               "q_per_request", "17");
}
TEST_F(DecodeValidation, QRowsNotBTimesQ) {
  args.q.shape[0] = 5;
  expect_rejected(args, "q.shape[0]", "5");
}
TEST_F(DecodeValidation, TopkQueryMajorWrongShape) {
  args.topk.shape[1] = 1;
  expect_rejected(args, "topk.shape[1]", "1");
}
TEST_F(DecodeValidation, TopkLayoutFlagMismatch) {
  args.topk_head_major = true;  // the tensor is [6, 2, 4]
  expect_rejected(args, "topk.shape[0]", "6");
}
TEST_F(DecodeValidation, StrictNamesTheQueryMajorElement) {
  // Query 3 = request 1, t = 1, position 1, local 0: a full row is [0, -1, -1, -1].
  query_major.data<std::int32_t>()[(3 * 2 + 1) * 4 + 2] = 0;
  expect_rejected(args, "topk[3, 1, 2]", "0", /*strict=*/true);
}

// ---- indexer ---------------------------------------------------------------------------

class IndexerValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    auto spec = small_spec(16);
    spec.h_i = 2;
    w = msa::bench::make_workload(spec);
    scores = sentinel_tensor(DType::kFP32, {2, w.total_q, 3});  // ceil(300 / 128) = 3
    args.index_q = w.index_q.view();
    args.index_k = w.index_kv();
    args.batch = w.batch();
    args.scores = scores.view();
  }

  void expect_rejected(const msa::IndexerArgs& a, const std::string& argument,
                       const std::string& value) {
    msa::Indexer op(2, 128);
    op.plan(a.batch);
    expect_error([&] { op.run(a); }, argument, value);
    EXPECT_TRUE(untouched(scores));
  }

  msa::bench::Workload w;
  HostTensor scores;
  msa::IndexerArgs args;
};

TEST_F(IndexerValidation, ValidInputsPass) {
  EXPECT_NO_THROW(msa::validate_indexer(2, 128, args, msa::Device::kCpu));
}
TEST_F(IndexerValidation, ScoresTooNarrow) {
  args.scores.shape[2] = 2;
  expect_rejected(args, "scores.shape[2]", "2");
}
TEST_F(IndexerValidation, ScoresWrongHeads) {
  args.scores.shape[0] = 1;
  expect_rejected(args, "scores.shape[0]", "1");
}
TEST_F(IndexerValidation, IndexQWrongDim) {
  args.index_q.shape[2] = 64;
  expect_rejected(args, "index_q.shape[2]", "64");
}
TEST_F(IndexerValidation, IndexCacheWithTwoHeads) {
  args.index_k.k.shape[1] = 2;
  expect_rejected(args, "index_k.k.shape[1]", "2");
}
TEST_F(IndexerValidation, IndexCacheWithValues) {
  args.index_k.v = w.index_k.view();
  expect_rejected(args, "index_k.v", "present");
}
TEST_F(IndexerValidation, IndexPageTableOutOfRange) {
  w.page_table.data<std::int32_t>()[0] = -2;
  expect_rejected(args, "index_k.page_table[0, 0]", "-2");
}

// ---- top-k selection -------------------------------------------------------------------

class TopkValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    w = msa::bench::make_workload(small_spec(32));
    scores = HostTensor(DType::kFP32, {2, w.total_q, 3});
    ids = sentinel_tensor(DType::kInt32, {2, w.total_q, 4});
    args.scores = scores.view();
    args.batch = w.batch();
    args.topk = ids.view();
  }

  void expect_rejected(const msa::TopkArgs& a, const std::string& argument,
                       const std::string& value) {
    msa::TopK op(4);
    op.plan(a.batch);
    expect_error([&] { op.run(a); }, argument, value);
    EXPECT_TRUE(untouched(ids));
  }

  msa::bench::Workload w;
  HostTensor scores, ids;
  msa::TopkArgs args;
};

TEST_F(TopkValidation, ValidInputsPass) {
  EXPECT_NO_THROW(msa::validate_topk_args(4, args, msa::Device::kCpu));
}
TEST_F(TopkValidation, ScoresTooNarrow) {
  args.scores.shape[2] = 2;
  expect_rejected(args, "scores.shape[2]", "2");
}
TEST_F(TopkValidation, ScoresWrongRows) {
  args.scores.shape[1] = 9;
  expect_rejected(args, "scores.shape[1]", "9");
}
TEST_F(TopkValidation, OutputWrongWidth) {
  args.topk.shape[2] = 3;
  expect_rejected(args, "topk.shape[2]", "3");
}
TEST_F(TopkValidation, OutputWrongDtype) {
  args.topk.dtype = DType::kFP32;
  expect_rejected(args, "topk.dtype", "fp32");
}

// ---- combine ---------------------------------------------------------------------------

class CombineValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    o_partial = HostTensor(DType::kFP32, {4, 5, 8, 128});
    lse_partial = HostTensor(DType::kFP32, {4, 5, 8});
    counts = HostTensor(DType::kInt32, {5, 2});
    for (int i = 0; i < 10; ++i) counts.data<std::int32_t>()[i] = i % 5;
    out = sentinel_tensor(DType::kBF16, {5, 8, 128});
    lse = sentinel_tensor(DType::kFP32, {5, 8});
    args.o_partial = o_partial.view();
    args.lse_partial = lse_partial.view();
    args.split_counts = counts.view();
    args.out = out.view();
    args.lse = lse.view();
  }

  void expect_rejected(const msa::CombineArgs& a, const std::string& argument,
                       const std::string& value) {
    msa::Combine op(small_shape());
    op.plan(5);
    expect_error([&] { op.run(a); }, argument, value);
    EXPECT_TRUE(untouched(out));
    EXPECT_TRUE(untouched(lse));
  }

  HostTensor o_partial, lse_partial, counts, out, lse;
  msa::CombineArgs args;
};

TEST_F(CombineValidation, ValidInputsPass) {
  EXPECT_NO_THROW(msa::validate_combine(small_shape(), args, msa::Device::kCpu));
}
TEST_F(CombineValidation, OPartialWrongDtype) {
  args.o_partial.dtype = DType::kFP16;
  expect_rejected(args, "o_partial.dtype", "fp16");
}
TEST_F(CombineValidation, LsePartialWrongShape) {
  args.lse_partial.shape[0] = 3;
  expect_rejected(args, "lse_partial.shape[0]", "3");
}
TEST_F(CombineValidation, SplitCountsWrongShape) {
  args.split_counts.shape[1] = 1;
  expect_rejected(args, "split_counts.shape[1]", "1");
}
TEST_F(CombineValidation, SplitCountBeyondTopk) {
  counts.data<std::int32_t>()[2 * 2 + 1] = 5;
  expect_rejected(args, "split_counts[2, 1]", "5");
}
TEST_F(CombineValidation, OutWrongDtype) {
  args.out.dtype = DType::kFP32;
  expect_rejected(args, "out.dtype", "fp32");
}
TEST_F(CombineValidation, SinksWrongShape) {
  HostTensor sinks(DType::kFP32, {4});
  args.sinks = sinks.view();
  expect_rejected(args, "sinks.shape[0]", "4");
}

}  // namespace
