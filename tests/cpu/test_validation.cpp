// Argument validation (spec §8): every bad input is an msa::Error naming the argument and the
// value, raised before any output is written.
//
// Table-driven: Inputs holds valid arguments of one operator (the baseline); a row of
// rejections() mutates them and names the argument and value the error must carry (and
// optionally a part of its message), and the call must leave every output as it was; a row of
// acceptances() mutates them into another valid form that validation must pass. Each row is
// one gtest case, named "<Op>_<Row>".
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "core/validate.h"
#include "msa/msa.h"
#include "tests/cpu/validation_inputs.h"
#include "tests/support/case_name.h"
#include "tests/support/expect_error.h"
#include "tests/support/host_tensor.h"
#include "tests/support/poison.h"

namespace {

using msa::DType;
using msa::bench::HostTensor;
using msa::test::copy_of;
using msa::test::expect_error;
using msa::test::untouched;
using namespace msa::test::validation;

class Rejects : public ::testing::TestWithParam<Reject> {};

TEST_P(Rejects, NamesArgumentAndValueAndWritesNothing) {
  const Reject& r = GetParam();
  Inputs in(r.op);
  r.mutate(in);
  const std::string value = in.value.empty() ? r.value : in.value;
  msa::Options o;
  o.strict = r.strict;
  switch (r.op) {
    case Op::kShape:
      expect_error([&] { msa::validate_shape(in.shape); }, r.argument, value, r.message);
      expect_error([&] { msa::SparsePrefill op(in.shape, {}); }, r.argument, value);
      break;
    case Op::kPrefill:
    case Op::kPrefillFlat: {
      msa::SparsePrefill op(in.p.w.spec.shape, o);
      op.plan(in.p.w.batch(), in.p.w.topk.view());
      expect_error([&] { op.run(in.p.args); }, r.argument, value, r.message);
      EXPECT_TRUE(untouched(in.p.out)) << "out was written";
      EXPECT_TRUE(untouched(in.p.lse)) << "lse was written";
      break;
    }
    case Op::kPrefillCuda:
      expect_error([&] { msa::validate_prefill(in.p.w.spec.shape, in.p.args, o, msa::Device::kCuda); },
                   r.argument, value, r.message);
      break;
    case Op::kDecode: {
      msa::SparseDecode op(in.d.w.spec.shape, o);
      op.plan(3, 2, 300);
      expect_error([&] { op.run(in.d.args); }, r.argument, value, r.message);
      expect_error([&] { msa::validate_decode(in.d.w.spec.shape, in.d.args, o, msa::Device::kCpu); }, r.argument,
                   value);
      EXPECT_TRUE(untouched(in.d.out)) << "out was written";
      EXPECT_TRUE(untouched(in.d.lse)) << "lse was written";
      break;
    }
    case Op::kDecodeCheck:
      expect_error([&] { msa::validate_decode(in.d.w.spec.shape, in.d.args, o, msa::Device::kCpu); }, r.argument,
                   value, r.message);
      break;
    case Op::kIndexer: {
      msa::Indexer op(2, 128);
      op.plan(in.indexer.batch);
      expect_error([&] { op.run(in.indexer); }, r.argument, value, r.message);
      EXPECT_TRUE(untouched(in.scores)) << "scores were written";
      break;
    }
    case Op::kTopk: {
      msa::TopK op(4);
      op.plan(in.topk.batch);
      expect_error([&] { op.run(in.topk); }, r.argument, value, r.message);
      EXPECT_TRUE(untouched(in.ids)) << "topk was written";
      break;
    }
    case Op::kCombine: {
      msa::Combine op(small_shape());
      op.plan(5);
      expect_error([&] { op.run(in.combine); }, r.argument, value, r.message);
      EXPECT_TRUE(untouched(in.out)) << "out was written";
      EXPECT_TRUE(untouched(in.lse)) << "lse was written";
      break;
    }
  }
}

class Accepts : public ::testing::TestWithParam<Accept> {};

TEST_P(Accepts, PassValidation) {
  const Accept& a = GetParam();
  Inputs in(a.op);
  a.mutate(in);
  msa::Options strict;
  strict.strict = true;
  switch (a.op) {
    case Op::kShape: EXPECT_NO_THROW(msa::validate_shape(in.shape)); break;
    case Op::kPrefill:
    case Op::kPrefillFlat:
    case Op::kPrefillCuda: {
      const msa::Device device = a.op == Op::kPrefillCuda ? msa::Device::kCuda : msa::Device::kCpu;
      EXPECT_NO_THROW(msa::validate_prefill(in.p.w.spec.shape, in.p.args, {}, device));
      EXPECT_NO_THROW(msa::validate_prefill(in.p.w.spec.shape, in.p.args, strict, device));
      break;
    }
    case Op::kDecode:
    case Op::kDecodeCheck:
      EXPECT_NO_THROW(msa::validate_decode(in.d.w.spec.shape, in.d.args, {}, msa::Device::kCpu));
      EXPECT_NO_THROW(msa::validate_decode(in.d.w.spec.shape, in.d.args, strict, msa::Device::kCpu));
      break;
    case Op::kIndexer: EXPECT_NO_THROW(msa::validate_indexer(2, 128, in.indexer, msa::Device::kCpu)); break;
    case Op::kTopk: EXPECT_NO_THROW(msa::validate_topk_args(4, in.topk, msa::Device::kCpu)); break;
    case Op::kCombine: EXPECT_NO_THROW(msa::validate_combine(small_shape(), in.combine, msa::Device::kCpu)); break;
  }
}

// The control for every "untouched" check: a valid run does overwrite out and lse.
TEST(PrefillValidation, SentinelSeesAWrite) {
  Inputs in(Op::kPrefill);
  msa::SparsePrefill op(in.p.w.spec.shape);
  op.plan(in.p.w.batch(), in.p.w.topk.view());
  op.run(in.p.args);
  EXPECT_FALSE(untouched(in.p.out));
  EXPECT_FALSE(untouched(in.p.lse));
}

// Strict mode names the first contract breach at plan() too (the run() side is a row of the
// table); without strict the same row is valid.
TEST(PrefillValidation, StrictContractAtPlan) {
  Inputs in(Op::kPrefill);
  HostTensor bad = copy_of(in.p.w.topk);
  // Head 1, query 6 (request 2, local 0): a full row is [0, -1, -1, -1].
  bad.data<std::int32_t>()[(1 * 8 + 6) * 4 + 1] = 0;
  in.p.args.topk = bad.view();
  msa::Options strict;
  strict.strict = true;
  msa::SparsePrefill op(in.p.w.spec.shape, strict);
  expect_error([&] { op.plan(in.p.w.batch(), bad.view()); }, "topk[1, 6, 1]", "0");
  EXPECT_NO_THROW(msa::validate_prefill(in.p.w.spec.shape, in.p.args, {}, msa::Device::kCpu));
}

INSTANTIATE_TEST_SUITE_P(Validation, Rejects, ::testing::ValuesIn(rejections()), msa::test::CaseName{});
INSTANTIATE_TEST_SUITE_P(Validation, Accepts, ::testing::ValuesIn(acceptances()), msa::test::CaseName{});

}  // namespace
