// The test kit (tests/support) on its own: case names, the three-part comparison as a gtest
// assertion, and the poisoning helpers, including the check they exist for: NaN in every cache
// slot no request reads changes no bit of a CPU prefill.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "bench/workload.h"
#include "cpu/reference.h"
#include "msa/msa.h"
#include "tests/support/case_name.h"
#include "tests/support/compare.h"
#include "tests/support/cuda_check.h"
#include "tests/support/host_tensor.h"
#include "tests/support/poison.h"

namespace {

using msa::DType;
using msa::bench::HostTensor;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(SupportKit, CaseNamesKeepOnlyGtestCharacters) {
  using msa::test::case_name;
  EXPECT_EQ(case_name("page128 g16 / random-mixed"), "page128_g16_random_mixed");
  EXPECT_EQ(case_name("page128_g16_random"), "page128_g16_random");
  EXPECT_EQ(case_name("k_len[2] = 2"), "k_len_2_2");
  EXPECT_EQ(case_name("  --x--  "), "x");
  EXPECT_EQ(case_name("a _b"), "a_b");
  EXPECT_EQ(case_name("__a__"), "a");
  EXPECT_EQ(case_name("G=16, \xc3\xa9t\xc3\xa9"), "G_16_t");
  EXPECT_EQ(case_name(""), "case");
  EXPECT_EQ(case_name("%%"), "case");
  struct P {
    std::string name;
  };
  EXPECT_EQ(msa::test::CaseName{}(::testing::TestParamInfo<P>(P{"flat, g16"}, 0)), "flat_g16");
}

TEST(SupportKit, CloseIsTheThreePartComparison) {
  using msa::test::close;
  const std::vector<float> ref = {1.f, -2.f, 0.5f, -kInf, kInf, 0.f};
  EXPECT_TRUE(close(ref, ref));
  std::vector<float> got = ref;
  got[2] = 0.5f + 0.004f;  // within 1e-2 + 1e-2 |ref|
  EXPECT_TRUE(close(got, ref));
  got[2] = 0.6f;  // outside
  const ::testing::AssertionResult off = close(got, ref);
  EXPECT_FALSE(off);
  EXPECT_NE(std::string(off.message()).find("(element 2: got 0.6"), std::string::npos) << off.message();
  got = ref;
  got[3] = kInf;  // an infinity of the other sign
  EXPECT_FALSE(close(got, ref));
  got = ref;
  got[5] = kNaN;  // NaN is never equal
  EXPECT_FALSE(close(got, ref));
  EXPECT_FALSE(close(ref, std::vector<float>(5, 0.f)));  // sizes differ
  // The cosine part: every element within an absolute tolerance, the direction off.
  const std::vector<float> a = {1e-3f, 0.f}, b = {0.f, 1e-3f};
  EXPECT_TRUE(close(a, b, {1e-2, 0.0, -1.0}));
  EXPECT_FALSE(close(a, b, {1e-2, 0.0, 0.9999}));
  // HostTensor form, any dtypes.
  HostTensor t(DType::kBF16, {2, 3}), u(DType::kFP32, {6});
  for (int i = 0; i < 6; ++i) {
    t.set(i, ref[i]);
    u.set(i, ref[i]);
  }
  EXPECT_TRUE(close(t, u, msa::test::kOutTolerance));
  EXPECT_FALSE(close(t, HostTensor(DType::kFP32, {5})));
}

TEST(SupportKit, SentinelsAndPoisonBits) {
  HostTensor t = msa::test::sentinel_tensor(DType::kBF16, {3, 4});
  EXPECT_TRUE(msa::test::untouched(t));
  EXPECT_FALSE(msa::test::any_nan(t));
  t.set(5, kNaN);
  EXPECT_FALSE(msa::test::untouched(t));
  EXPECT_TRUE(msa::test::any_nan(t));
  std::vector<unsigned char> bytes(8, msa::test::kPoisonByte);
  EXPECT_TRUE(msa::test::is_poison_bits(bytes.data(), bytes.size()));
  float all_ones;
  std::memcpy(&all_ones, bytes.data(), 4);
  EXPECT_TRUE(std::isnan(all_ones));
  bytes[7] = 0;
  EXPECT_FALSE(msa::test::is_poison_bits(bytes.data(), bytes.size()));
  const HostTensor v = msa::test::int_tensor({3, -1, 7});
  ASSERT_EQ(v.numel(), 3);
  EXPECT_EQ(v.data<std::int32_t>()[1], -1);
}

TEST(SupportKit, GpuAvailableIsTheLibrarysAnswer) { EXPECT_EQ(msa::test::gpu_available(), msa::cuda_available()); }

struct PoisonCase {
  std::string name;
  int page_size;
  bool token_major;
  std::int64_t expect_poisoned_at_least;
};
void PrintTo(const PoisonCase& c, std::ostream* os) { *os << c.name; }

class UnreadCache : public ::testing::TestWithParam<PoisonCase> {};

// Poisoning marks exactly the unread slots: the CPU prefill (public operator and FP64 gather)
// gives the same bits with and without it, and read slots stay finite.
TEST_P(UnreadCache, PoisonChangesNoResult) {
  const PoisonCase& c = GetParam();
  msa::bench::WorkloadSpec spec;
  spec.shape.h_q = 8;
  spec.shape.h_kv = 2;
  spec.shape.topk = 4;
  spec.requests = {{5, 300}, {0, 17}, {3, 3}, {40, 200}};
  spec.page_size = c.page_size;
  spec.token_major_pages = c.token_major;
  spec.sinks = true;
  spec.seed = 5;
  msa::bench::Workload w = msa::bench::make_workload(spec);
  msa::bench::Workload poisoned = msa::bench::make_workload(spec);
  const std::int64_t n = msa::test::poison_unread_cache(poisoned);
  EXPECT_GE(n, c.expect_poisoned_at_least);
  EXPECT_EQ(msa::test::any_nan(poisoned.k), n > 0);
  EXPECT_EQ(msa::test::any_nan(poisoned.v), n > 0);
  EXPECT_FALSE(msa::test::any_nan(w.k));

  const auto run = [&](const msa::bench::Workload& x, bool gather) {
    std::vector<HostTensor> o;
    o.emplace_back(DType::kBF16, std::vector<std::int64_t>{x.total_q, 8, 128});
    o.emplace_back(DType::kFP32, std::vector<std::int64_t>{x.total_q, 8});
    if (gather) {
      msa::cpu::sparse_prefill_gather(x.spec.shape, x.prefill_args(o[0], o[1]));
    } else {
      msa::sparse_prefill(x.spec.shape, x.prefill_args(o[0], o[1]), {});
    }
    return o;
  };
  for (const bool gather : {false, true}) {
    const auto clean = run(w, gather), dirty = run(poisoned, gather);
    for (int i = 0; i < 2; ++i) {
      ASSERT_EQ(clean[i].bytes(), dirty[i].bytes());
      EXPECT_EQ(std::memcmp(clean[i].raw(), dirty[i].raw(), clean[i].bytes()), 0) << (gather ? "gather " : "") << i;
      EXPECT_FALSE(msa::test::any_nan(dirty[i]));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    SupportKit, UnreadCache,
    ::testing::Values(PoisonCase{"page32", 32, false, 1}, PoisonCase{"page64_token_major", 64, true, 1},
                      PoisonCase{"page16", 16, false, 1}, PoisonCase{"flat", 0, false, 0}),
    msa::test::CaseName{});

}  // namespace
