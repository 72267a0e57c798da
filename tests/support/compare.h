// The three-part comparison (elementwise |got - ref| <= atol + rtol |ref|, cosine similarity,
// identical +-inf / NaN positions) as gtest assertions. The implementation is bench/compare.h,
// shared with the msa tool; this wraps it so a failure prints the compare report and the first
// bad element:
//   EXPECT_TRUE(msa::test::close(out, ref_out));                    // spec §7 tolerance
//   EXPECT_TRUE(msa::test::close(lse, ref_lse, msa::test::kLseTolerance)) << "lse";
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "bench/compare.h"
#include "bench/workload.h"
#include "msa/error.h"

namespace msa::test {

using Tolerance = msa::bench::Tolerance;

// Attention outputs (spec §7): 1e-2 + 1e-2 |ref|, cosine >= 0.9999.
inline constexpr Tolerance kOutTolerance{};
// Log-sum-exp rows: 1e-3 absolute, same -inf positions; no cosine test (an LSE is not a vector).
inline constexpr Tolerance kLseTolerance{1e-3, 0.0, -1.0};

namespace detail {
template <class Get>
::testing::AssertionResult verdict(const msa::bench::CompareResult& r, Get&& values_at) {
  ::testing::AssertionResult out = r.ok ? ::testing::AssertionSuccess() : ::testing::AssertionFailure();
  out << r.summary();
  if (!r.ok && r.first_bad >= 0) {
    const auto [got, ref] = values_at(r.first_bad);
    out << " (element " << r.first_bad << ": got " << got << ", ref " << ref << ")";
  }
  return out;
}
}  // namespace detail

inline ::testing::AssertionResult close(const float* got, const float* ref, std::int64_t n,
                                        const Tolerance& tol = {}) {
  return detail::verdict(msa::bench::compare(got, ref, n, tol), [&](std::int64_t i) {
    return std::pair{got[i], ref[i]};
  });
}

inline ::testing::AssertionResult close(const std::vector<float>& got, const std::vector<float>& ref,
                                        const Tolerance& tol = {}) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure() << "got has " << got.size() << " elements, ref " << ref.size();
  return close(got.data(), ref.data(), static_cast<std::int64_t>(got.size()), tol);
}

// Any dtypes: both sides are read as float.
inline ::testing::AssertionResult close(const msa::bench::HostTensor& got, const msa::bench::HostTensor& ref,
                                        const Tolerance& tol = {}) {
  if (got.numel() != ref.numel())
    return ::testing::AssertionFailure() << "got has " << got.numel() << " elements, ref " << ref.numel();
  return detail::verdict(msa::bench::compare(got, ref, tol), [&](std::int64_t i) {
    return std::pair{got.get(i), ref.get(i)};
  });
}

}  // namespace msa::test
