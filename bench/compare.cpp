#include "bench/compare.h"

#include <cmath>
#include <cstdio>
#include <vector>

namespace msa::bench {

std::string CompareResult::summary() const {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s max_abs_err=%.3g cosine=%.6f bad=%lld first_bad=%lld special_mismatch=%lld",
                ok ? "ok" : "FAIL", max_abs_err, cosine, static_cast<long long>(bad_count),
                static_cast<long long>(first_bad), static_cast<long long>(special_mismatch));
  return buf;
}

CompareResult compare(const float* got, const float* ref, std::int64_t n, const Tolerance& tol) {
  CompareResult r;
  double dot = 0.0, ng = 0.0, nr = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double g = got[i], e = ref[i];
    const bool g_fin = std::isfinite(g), e_fin = std::isfinite(e);
    if (std::isnan(g) || std::isnan(e) || g_fin != e_fin || (!g_fin && g != e)) {
      ++r.special_mismatch;
      if (r.first_bad < 0) r.first_bad = i;
      continue;
    }
    if (!g_fin) continue;  // identical infinities
    const double err = std::fabs(g - e);
    r.max_abs_err = std::max(r.max_abs_err, err);
    if (err > tol.atol + tol.rtol * std::fabs(e)) {
      ++r.bad_count;
      if (r.first_bad < 0) r.first_bad = i;
    }
    dot += g * e;
    ng += g * g;
    nr += e * e;
  }
  if (ng > 0.0 || nr > 0.0) r.cosine = (ng > 0.0 && nr > 0.0) ? dot / std::sqrt(ng * nr) : 0.0;
  r.ok = r.bad_count == 0 && r.special_mismatch == 0 && r.cosine >= tol.min_cosine;
  return r;
}

CompareResult compare(const HostTensor& got, const HostTensor& ref, const Tolerance& tol) {
  if (got.numel() != ref.numel())
    throw Error("got.numel", std::to_string(got.numel()),
                "differs from ref.numel = " + std::to_string(ref.numel()));
  std::vector<float> g(static_cast<std::size_t>(got.numel())), e(static_cast<std::size_t>(ref.numel()));
  for (std::int64_t i = 0; i < got.numel(); ++i) {
    g[i] = got.get(i);
    e[i] = ref.get(i);
  }
  return compare(g.data(), e.data(), got.numel(), tol);
}

}  // namespace msa::bench
