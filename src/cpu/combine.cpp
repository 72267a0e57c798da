// Combine, spec §3: the ascending-slot LSE merge of normalised partials, FP32. A sink joins as
// one more term exp(sink) with a zero value (spec §6).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/parallel.h"
#include "cpu/reference.h"
#include "cpu/row_helpers.h"

namespace msa::cpu {

void combine(const AttentionShape& shape, const CombineArgs& args) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int d = shape.d;
  const int group = shape.group();
  const std::int64_t total_q = args.out.dim(0);
  const std::int64_t slots = args.o_partial.dim(0);
  const TensorView& op = args.o_partial;
  const TensorView& lp = args.lse_partial;
  const auto* lse_partial = lp.ptr<const float>();
  const auto* counts = args.split_counts.ptr<const std::int32_t>();

  ParallelErrors errors;
#pragma omp parallel
  {
    std::vector<float> w, part, acc;
    errors.run([&] {
      w.resize(static_cast<std::size_t>(slots));
      part.resize(static_cast<std::size_t>(d));
      acc.resize(static_cast<std::size_t>(d));
    });
#pragma omp for schedule(static)
    for (std::int64_t q = 0; q < total_q; ++q) errors.run([&] {
      for (int h = 0; h < shape.h_q; ++h) {
        // Clamped so that a bad count can never read past the partial buffers.
        const std::int64_t n = std::clamp<std::int64_t>(
            counts[args.split_counts.offset(q, h / group)], 0, slots);
        const float* sink_ptr = sink_of(args.sinks, h);
        const bool has_sink = sink_ptr != nullptr;
        const float sink = has_sink ? *sink_ptr : 0.f;
        // NaN LSEs fail every comparison here and poison z below, which zeroes the row.
        float m = has_sink ? sink : kNegInf;
        for (std::int64_t s = 0; s < n; ++s) m = std::max(m, lse_partial[lp.offset(s, q, h)]);
        float z = has_sink ? std::exp(sink - m) : 0.f;
        for (std::int64_t s = 0; s < n; ++s) {
          w[s] = std::exp(lse_partial[lp.offset(s, q, h)] - m);
          z += w[s];
        }
        std::fill(acc.begin(), acc.end(), 0.f);
        float lse = kNegInf;
        if (m > kNegInf && z > 0.f && std::isfinite(z)) {
          lse = m + std::log(z);
          for (std::int64_t s = 0; s < n; ++s) {
            // A slot with no visible key carries no mass; skipping it keeps whatever its
            // partial holds out of the sum.
            if (w[s] == 0.f) continue;
            const float c = w[s] / z;
            load_row(op.data, op.dtype, op.offset(s, q, h, 0), d, part.data());
            for (int j = 0; j < d; ++j) acc[j] += c * part[j];
          }
        }
        store_row(args.out.data, args.out.dtype, args.out.offset(q, h, 0), d, acc.data());
        if (args.lse.present()) args.lse.ptr<float>()[args.lse.offset(q, h)] = lse;
      }
    });
  }
  errors.rethrow();
}

}  // namespace msa::cpu
