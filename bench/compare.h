// The three-part check of the house rules: elementwise tolerance, cosine similarity, and
// identical positions of +-inf / NaN.
#pragma once

#include <cstdint>
#include <string>

#include "bench/workload.h"

namespace msa::bench {

struct Tolerance {
  double atol = 1e-2;        // |err| <= atol + rtol * |ref|
  double rtol = 1e-2;
  double min_cosine = 0.9999;  // ignored when both sides are all zero
};

struct CompareResult {
  bool ok = true;
  double max_abs_err = 0.0;   // over finite pairs
  double cosine = 1.0;
  std::int64_t bad_count = 0;   // elements outside the tolerance
  std::int64_t first_bad = -1;  // flat index of the first
  std::int64_t special_mismatch = 0;  // +-inf/NaN in one and not the other (or NaN anywhere)
  std::string summary() const;  // one line
};

// got and ref must have equal numel; values are read as float (or double for ref_fp64).
CompareResult compare(const HostTensor& got, const HostTensor& ref, const Tolerance& tol);
CompareResult compare(const float* got, const float* ref, std::int64_t n, const Tolerance& tol);

}  // namespace msa::bench
