// Sparse decode (online softmax, FP32) against the FP64 prefill gather on the equivalent
// varlen batch: rows b * Q + t with q_len = Q and k_len = seq_len.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <string>
#include <vector>

#include "bench/workload.h"
#include "cpu/reference.h"
#include "msa/msa.h"
#include "core/half.h"
#include "tests/support/compare.h"
#include "tests/support/expect_error.h"

namespace {

using msa::DType;
using msa::bench::Fp8Kv;
using msa::bench::HostTensor;
using msa::bench::Request;
using msa::bench::Selection;
using msa::bench::Workload;
using msa::bench::WorkloadSpec;

struct DecodeCase {
  int q_per_request;
  int h_q, h_kv, page_size;
  bool token_major, head_major, sinks;
  DType dtype;
  float scale;  // 0: 1/sqrt(d); large values make the running max jump past the lazy threshold
};

void check_decode(const DecodeCase& c, std::uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "Q " << c.q_per_request << " G " << c.h_q / c.h_kv << " page " << c.page_size
                                  << " head_major " << c.head_major << " sinks " << c.sinks << " scale " << c.scale);
  const int qn = c.q_per_request;
  WorkloadSpec spec;
  spec.shape.h_q = c.h_q;
  spec.shape.h_kv = c.h_kv;
  spec.shape.d = 128;
  spec.shape.topk = 16;
  spec.shape.scale = c.scale;
  // seq_len = Q (one short block), k_len not multiples of 128, and more blocks than K.
  spec.requests = {{qn, qn}, {qn, 3000}, {qn, 129 + qn}, {qn, 700}, {qn, 2048}};
  spec.page_size = c.page_size;
  spec.token_major_pages = c.token_major;
  spec.dtype = c.dtype;
  spec.selection = Selection::kRandom;
  spec.sinks = c.sinks;
  spec.seed = seed;
  Workload w = msa::bench::make_workload(spec);
  // Adversarial rows: all -1, a duplicate, an out-of-range id.
  auto* ids = w.topk.data<std::int32_t>();
  std::fill(ids, ids + 16, -1);
  ids[(w.total_q - 1) * 16 + 1] = ids[(w.total_q - 1) * 16];
  ids[(w.total_q - 2) * 16] = 1000;

  HostTensor ref_out(c.dtype, {w.total_q, c.h_q, 128}), ref_lse(DType::kFP32, {w.total_q, c.h_q});
  msa::cpu::sparse_prefill_gather(spec.shape, w.prefill_args(ref_out, ref_lse));

  const HostTensor query_major = msa::bench::query_major_topk(w.topk);
  HostTensor out(c.dtype, {w.total_q, c.h_q, 128}), lse(DType::kFP32, {w.total_q, c.h_q});
  out.fill(3.f);
  msa::DecodeArgs a;
  a.q = w.q.view();
  a.kv = w.kv();
  a.seq_len = w.k_len.view();
  a.topk = c.head_major ? w.topk.view() : query_major.view();
  a.topk_head_major = c.head_major;
  a.q_per_request = qn;
  a.sinks = w.sinks.view();
  a.out = out.view();
  a.lse = lse.view();
  msa::sparse_decode(spec.shape, a, msa::Options{});

  EXPECT_TRUE(msa::test::close(out, ref_out, msa::test::kOutTolerance)) << "out";
  EXPECT_TRUE(msa::test::close(lse, ref_lse, msa::test::kLseTolerance)) << "lse";
}

TEST(ReferenceDecode, MatchesPrefillGather) {
  const std::vector<DecodeCase> cases = {
      {1, 16, 1, 64, false, false, false, DType::kBF16, 0.f},
      {1, 8, 2, 0, false, true, true, DType::kFP16, 0.f},
      {8, 16, 1, 16, true, false, true, DType::kBF16, 0.f},
      {8, 8, 8, 128, false, true, false, DType::kBF16, 0.f},
      {16, 8, 2, 32, false, false, true, DType::kBF16, 0.f},
      {16, 16, 4, 0, false, true, false, DType::kFP16, 0.f},
  };
  std::uint64_t seed = 101;
  for (const auto& c : cases) check_decode(c, seed++);
}

// Score spreads of tens of log2 units: the lazy rescale both skips and fires.
TEST(ReferenceDecode, LargeScoresExerciseTheRescale) {
  check_decode({8, 8, 2, 64, false, false, true, DType::kBF16, 6.f}, 111);
  check_decode({1, 16, 1, 0, false, true, false, DType::kBF16, 10.f}, 112);
}

// ---- FP8 E4M3 K/V ------------------------------------------------------------------------

// Factors that are powers of two make the dequantised reference exact; others round it to bf16,
// well inside the spec tolerance.
void check_fp8_decode(int page_size, bool token_major, const std::vector<float>& kf, const std::vector<float>& vf,
                      std::uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "fp8 page " << page_size << " token_major " << token_major << " factors "
                                  << kf.size());
  const int qn = 4;
  WorkloadSpec spec;
  spec.shape = {.h_q = 16, .h_kv = 4, .d = 128, .topk = 16};
  spec.requests = {{qn, 3000}, {qn, qn}, {qn, 700}};
  spec.page_size = page_size;
  spec.token_major_pages = token_major;
  spec.sinks = true;
  spec.seed = seed;
  Workload w = msa::bench::make_workload(spec);
  const Fp8Kv fp8 = msa::bench::quantise_kv_fp8(w, kf, vf);

  // The reference reads the dequantised values (w's K/V now hold them).
  HostTensor ref_out(DType::kBF16, {w.total_q, 16, 128}), ref_lse(DType::kFP32, {w.total_q, 16});
  msa::cpu::sparse_prefill_gather(spec.shape, w.prefill_args(ref_out, ref_lse));

  const HostTensor query_major = msa::bench::query_major_topk(w.topk);
  HostTensor out(DType::kBF16, {w.total_q, 16, 128}), lse(DType::kFP32, {w.total_q, 16});
  msa::DecodeArgs a;
  a.q = w.q.view();
  a.kv = w.kv();
  a.kv.k = msa::bench::retyped(a.kv.k, fp8.k);
  a.kv.v = msa::bench::retyped(a.kv.v, fp8.v);
  a.k_descale = fp8.k_descale.view();
  a.v_descale = fp8.v_descale.view();
  a.seq_len = w.k_len.view();
  a.topk = query_major.view();
  a.q_per_request = qn;
  a.sinks = w.sinks.view();
  a.out = out.view();
  a.lse = lse.view();
  msa::sparse_decode(spec.shape, a, msa::Options{});
  EXPECT_TRUE(msa::test::close(out, ref_out, msa::test::kOutTolerance)) << "out";
  EXPECT_TRUE(msa::test::close(lse, ref_lse, msa::test::kLseTolerance)) << "lse";
}

TEST(ReferenceDecode, Fp8KvAgainstTheDequantisedReference) {
  check_fp8_decode(128, false, {0.5f, 1.f, 2.f, 0.25f}, {1.f, 0.5f, 0.25f, 2.f}, 201);  // per KV head
  check_fp8_decode(32, true, {0.125f}, {0.5f}, 202);                                      // per tensor
  check_fp8_decode(0, false, {0.37f}, {0.011f, 0.02f, 0.7f, 1.3f}, 203);                 // flat, any factors
}

TEST(ReferenceDecode, Fp8Conversions) {
  // Every stored value round-trips; the extremes and rounding are the format's.
  for (int x = 0; x < 256; ++x) {
    const float f = msa::fp8_e4m3_to_float(static_cast<std::uint8_t>(x));
    if ((x & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(f)) << x;
      continue;
    }
    EXPECT_EQ(msa::float_to_fp8_e4m3(f), (x == 0x80 ? 0x80 : x)) << x;
  }
  EXPECT_EQ(msa::fp8_e4m3_to_float(0x7e), 448.f);
  EXPECT_EQ(msa::fp8_e4m3_to_float(0x01), 1.f / 512.f);
  EXPECT_EQ(msa::float_to_fp8_e4m3(1e9f), 0x7e);    // satfinite
  EXPECT_EQ(msa::float_to_fp8_e4m3(-1e9f), 0xfe);
  EXPECT_EQ(msa::float_to_fp8_e4m3(1.0625f), 0x38);  // 1 + 1/16: halfway, to even (1.0)
  EXPECT_EQ(msa::float_to_fp8_e4m3(1.1875f), 0x3a);  // 1 + 3/16: halfway, to even (1.25)
  EXPECT_EQ(msa::float_to_fp8_e4m3(std::nanf("")), 0x7f);
}

TEST(ReferenceDecode, Fp8ArgumentsAreNamed) {
  WorkloadSpec spec;
  spec.shape = {.h_q = 8, .h_kv = 2, .d = 128, .topk = 4};
  spec.requests = {{2, 300}, {2, 9}};
  spec.seed = 7;
  Workload w = msa::bench::make_workload(spec);
  const Fp8Kv fp8 = msa::bench::quantise_kv_fp8(w, {1.f, 2.f}, {0.5f});
  const HostTensor query_major = msa::bench::query_major_topk(w.topk);
  HostTensor out(DType::kBF16, {w.total_q, 8, 128});
  HostTensor bad_factor(DType::kFP32, {3});
  HostTensor zero_factor(DType::kFP32, {2});
  zero_factor.set(0, 1.f);  // and 0 at [1]
  HostTensor q16(DType::kFP16, w.q.shape());
  const auto args = [&] {
    msa::DecodeArgs a;
    a.q = w.q.view();
    a.kv = w.kv();
    a.kv.k = msa::bench::retyped(a.kv.k, fp8.k);
    a.kv.v = msa::bench::retyped(a.kv.v, fp8.v);
    a.k_descale = fp8.k_descale.view();
    a.v_descale = fp8.v_descale.view();
    a.seq_len = w.k_len.view();
    a.topk = query_major.view();
    a.q_per_request = 2;
    a.out = out.view();
    return a;
  };
  const auto decode = [&](const msa::DecodeArgs& a) { msa::sparse_decode(spec.shape, a, msa::Options{}); };
  decode(args());  // the valid call
  using msa::test::expect_error;
  expect_error([&] { auto a = args(); a.k_descale = {}; decode(a); }, "k_descale", "absent");
  expect_error([&] { auto a = args(); a.k_descale = bad_factor.view(); decode(a); }, "k_descale.shape[0]", "3");
  expect_error([&] { auto a = args(); a.v_descale = zero_factor.view(); decode(a); }, "v_descale[1]", "0.000000");
  expect_error([&] { auto a = args(); a.kv.v = w.kv().v; decode(a); }, "v.dtype", "bf16");
  expect_error([&] { auto a = args(); a.q = q16.view(); a.out = HostTensor(DType::kFP16, w.q.shape()).view(); decode(a); },
               "q.dtype", "fp16");
  expect_error([&] { auto a = args(); a.kv = w.kv(); decode(a); }, "k_descale", "present");
  // The prefill does not take FP8 caches.
  HostTensor pout(DType::kBF16, {w.total_q, 8, 128});
  msa::PrefillArgs p = w.prefill_args(pout, HostTensor());
  p.kv.k = msa::bench::retyped(p.kv.k, fp8.k);
  p.kv.v = msa::bench::retyped(p.kv.v, fp8.v);
  expect_error([&] { msa::sparse_prefill(spec.shape, p, msa::Options{}); }, "k.dtype", "fp8_e4m3");
}

}  // namespace
