// Combine (spec §3) on hand-built partials against an FP64 formula: -inf slots, n = 0 rows,
// bf16 partials, sinks, and bitwise reproducibility.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "bench/workload.h"
#include "cpu/reference.h"
#include "msa/msa.h"
#include "tests/support/compare.h"

namespace {

using msa::DType;
using msa::bench::HostTensor;

constexpr std::int64_t kTotalQ = 6;
constexpr int kHq = 4, kHkv = 2, kD = 128, kTopk = 4;

struct Partials {
  HostTensor o, lse, counts, sinks;
};

// Counts per (query, kv head) cover n = 0, n = topk, all--inf rows and mixed -inf slots. The
// partials of -inf slots and of slots at and past n hold NaN, which must never reach out.
Partials make_partials(DType o_dtype, bool sinks, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> uniform(-3.f, 3.f);
  Partials p{HostTensor(o_dtype, {kTopk, kTotalQ, kHq, kD}), HostTensor(DType::kFP32, {kTopk, kTotalQ, kHq}),
             HostTensor(DType::kInt32, {kTotalQ, kHkv}), HostTensor()};
  const std::int32_t counts[kTotalQ][kHkv] = {{4, 0}, {1, 2}, {3, 4}, {2, 3}, {4, 1}, {0, 0}};
  std::memcpy(p.counts.raw(), counts, sizeof counts);
  for (std::int64_t s = 0; s < kTopk; ++s)
    for (std::int64_t q = 0; q < kTotalQ; ++q)
      for (int h = 0; h < kHq; ++h) {
        const std::int64_t row = (s * kTotalQ + q) * kHq + h;
        const bool valid = s < counts[q][h / (kHq / kHkv)];
        bool masked = valid && ((q == 3) || (s + q + h) % 5 == 0);  // q 3: every slot -inf
        p.lse.set(row, !valid ? NAN : masked ? -INFINITY : uniform(rng));
        for (std::int64_t j = 0; j < kD; ++j) p.o.set(row * kD + j, valid && !masked ? normal(rng) : NAN);
      }
  if (sinks) {
    p.sinks = HostTensor(DType::kFP32, {kHq});
    for (int h = 0; h < kHq; ++h) p.sinks.set(h, uniform(rng));
  }
  return p;
}

void reference(const Partials& p, HostTensor& out, HostTensor& lse) {
  for (std::int64_t q = 0; q < kTotalQ; ++q)
    for (int h = 0; h < kHq; ++h) {
      const int n = p.counts.data<std::int32_t>()[q * kHkv + h / (kHq / kHkv)];
      const bool sink = !p.sinks.empty();
      double m = sink ? p.sinks.get(h) : -INFINITY;
      for (int s = 0; s < n; ++s) m = std::max<double>(m, p.lse.get((s * kTotalQ + q) * kHq + h));
      double z = sink ? std::exp(p.sinks.get(h) - m) : 0.0;
      std::vector<double> acc(kD, 0.0);
      for (int s = 0; s < n; ++s) {
        const std::int64_t row = (s * kTotalQ + q) * kHq + h;
        if (std::isinf(p.lse.get(row))) continue;
        const double w = std::exp(p.lse.get(row) - m);
        z += w;
        for (int j = 0; j < kD; ++j) acc[j] += w * p.o.get(row * kD + j);
      }
      for (int j = 0; j < kD; ++j) out.set((q * kHq + h) * kD + j, z > 0.0 ? static_cast<float>(acc[j] / z) : 0.f);
      lse.set(q * kHq + h, z > 0.0 ? static_cast<float>(m + std::log(z)) : -INFINITY);
    }
}

msa::AttentionShape shape() {
  msa::AttentionShape s;
  s.h_q = kHq;
  s.h_kv = kHkv;
  s.d = kD;
  s.topk = kTopk;
  return s;
}

msa::CombineArgs args_of(const Partials& p, const HostTensor& out, const HostTensor& lse) {
  msa::CombineArgs a;
  a.o_partial = p.o.view();
  a.lse_partial = p.lse.view();
  a.split_counts = p.counts.view();
  a.out = out.view();
  a.lse = lse.view();
  a.sinks = p.sinks.view();
  return a;
}

TEST(ReferenceCombine, MatchesFp64Formula) {
  for (const DType o_dtype : {DType::kFP32, DType::kBF16}) {
    for (const bool sinks : {false, true}) {
      SCOPED_TRACE(testing::Message() << msa::dtype_name(o_dtype) << " sinks " << sinks);
      const Partials p = make_partials(o_dtype, sinks, 3);
      HostTensor out(DType::kBF16, {kTotalQ, kHq, kD}), lse(DType::kFP32, {kTotalQ, kHq});
      HostTensor ref_out(DType::kFP32, {kTotalQ, kHq, kD}), ref_lse(DType::kFP32, {kTotalQ, kHq});
      out.fill(5.f);
      lse.fill(5.f);
      msa::cpu::combine(shape(), args_of(p, out, lse));
      reference(p, ref_out, ref_lse);
      // FP32 vs FP64 merge: the bf16 rounding of out dominates.
      EXPECT_TRUE(msa::test::close(out, ref_out, {1e-5, 1.0 / 128, 0.99999}));
      EXPECT_TRUE(msa::test::close(lse, ref_lse, {1e-5, 1e-6, -1.0}));
      // n = 0 rows and all--inf rows: out 0; lse -inf, or the sink itself.
      for (const auto& [q, h] : {std::pair{0, 2}, std::pair{5, 0}, std::pair{3, 1}}) {
        EXPECT_EQ(lse.get(q * kHq + h), sinks ? p.sinks.get(h) : -INFINITY) << q << " " << h;
        for (int j = 0; j < kD; ++j) ASSERT_EQ(out.get((q * kHq + h) * kD + j), 0.f);
      }
    }
  }
}

TEST(ReferenceCombine, NonFiniteMergeGivesZeroAndMinusInf) {
  Partials p = make_partials(DType::kFP32, false, 4);
  p.lse.set((0 * kTotalQ + 1) * kHq + 0, NAN);       // q 1, h 0: its only slot is NaN
  p.lse.set((1 * kTotalQ + 2) * kHq + 3, INFINITY);  // q 2, h 3: +inf among finite slots
  HostTensor out(DType::kBF16, {kTotalQ, kHq, kD}), lse(DType::kFP32, {kTotalQ, kHq});
  msa::cpu::combine(shape(), args_of(p, out, lse));
  for (const auto& [q, h] : {std::pair{1, 0}, std::pair{2, 3}}) {
    EXPECT_EQ(lse.get(q * kHq + h), -INFINITY);
    for (int j = 0; j < kD; ++j) ASSERT_EQ(out.get((q * kHq + h) * kD + j), 0.f);
  }
}

TEST(ReferenceCombine, PublicObjectIsBitwiseReproducible) {
  const Partials p = make_partials(DType::kBF16, true, 5);
  HostTensor out_a(DType::kBF16, {kTotalQ, kHq, kD}), lse_a(DType::kFP32, {kTotalQ, kHq});
  HostTensor out_b(DType::kBF16, {kTotalQ, kHq, kD}), lse_b(DType::kFP32, {kTotalQ, kHq});
  msa::Combine op(shape(), msa::Options{});
  op.plan(kTotalQ);
  op.run(args_of(p, out_a, lse_a));
  op.run(args_of(p, out_b, lse_b));
  EXPECT_EQ(std::memcmp(out_a.raw(), out_b.raw(), out_a.bytes()), 0);
  EXPECT_EQ(std::memcmp(lse_a.raw(), lse_b.raw(), lse_a.bytes()), 0);
  HostTensor direct(DType::kBF16, {kTotalQ, kHq, kD}), direct_lse(DType::kFP32, {kTotalQ, kHq});
  msa::cpu::combine(shape(), args_of(p, direct, direct_lse));
  EXPECT_EQ(std::memcmp(out_a.raw(), direct.raw(), out_a.bytes()), 0);
}

}  // namespace
