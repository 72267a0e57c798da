// Helpers shared by the CPU reference operators: row loads, the selection set of a top-k row,
// and the FP64 masked softmax of one (query, head) over a gathered list of keys.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/half.h"
#include "core/k2q_host.h"
#include "cpu/kv_access.h"
#include "msa/tensor.h"

namespace msa::cpu {

// docs/numerics.md, "Extreme values": a scaled score s = scale * <q, k> that overflows or is
// not a number saturates to [-kScoreLimit, kScoreLimit] (NaN to -kScoreLimit) before the
// softmax, so every softmax sees finite scores and no output is NaN. 2^126 leaves room for the
// base-2 kernels' factor log2(e) and for lse = max + ln(sum) to stay finite.
inline constexpr float kScoreLimit = 0x1p126f;
inline float saturate_score(float s) {
  return s > kScoreLimit ? kScoreLimit : (s >= -kScoreLimit ? s : -kScoreLimit);
}
inline double saturate_score(double s) {
  constexpr double kLimit = kScoreLimit;
  return s > kLimit ? kLimit : (s >= -kLimit ? s : -kLimit);
}

// The sink of query head h, or nullptr when there is none: absent sinks, and (docs/numerics.md)
// a sink that is not finite, which is ignored (strict mode rejects it instead).
inline const float* sink_of(const TensorView& sinks, std::int64_t h) {
  if (!sinks.present()) return nullptr;
  const float* v = sinks.ptr<const float>() + h * sinks.stride[0];
  return std::isfinite(*v) ? v : nullptr;
}

// Converts d contiguous elements starting at element offset off of base to float.
inline void load_row(const void* base, DType t, std::int64_t off, int d, float* dst) {
  switch (t) {
    case DType::kBF16: {
      const auto* p = static_cast<const std::uint16_t*>(base) + off;
      for (int i = 0; i < d; ++i) dst[i] = bf16_to_float(p[i]);
      break;
    }
    case DType::kFP16: {
      const auto* p = static_cast<const std::uint16_t*>(base) + off;
      for (int i = 0; i < d; ++i) dst[i] = fp16_to_float(p[i]);
      break;
    }
    default:
      for (int i = 0; i < d; ++i) dst[i] = load_as_float(base, t, off + i);
  }
}

inline void store_row(void* base, DType t, std::int64_t off, int d, const float* src) {
  for (int i = 0; i < d; ++i) store_from_float(base, t, off + i, src[i]);
}

// Dot products in a fixed order (four interleaved partial sums, then summed pairwise): the
// same result on every run, with independent chains the compiler can overlap.
inline double dot_f64(const float* a, const float* b, int d) {
  double s[4] = {0.0, 0.0, 0.0, 0.0};
  int j = 0;
  for (; j + 4 <= d; j += 4)
    for (int u = 0; u < 4; ++u) s[u] += static_cast<double>(a[j + u]) * b[j + u];
  for (; j < d; ++j) s[0] += static_cast<double>(a[j]) * b[j];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

inline float dot_f32(const float* a, const float* b, int d) {
  float s[4] = {0.f, 0.f, 0.f, 0.f};
  int j = 0;
  for (; j + 4 <= d; j += 4)
    for (int u = 0; u < 4; ++u) s[u] += a[j + u] * b[j + u];
  for (; j < d; ++j) s[0] += a[j] * b[j];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

// The selection of one top-k row: its ids in [0, n_blocks), ascending, each once. Ids come
// strided (slot_stride elements apart) so both top-k layouts share this.
inline void selected_blocks(const std::int32_t* ids, std::int64_t slot_stride, int topk,
                            std::int64_t n_blocks, std::vector<std::int32_t>& out) {
  out.resize(static_cast<std::size_t>(topk));
  out.resize(static_cast<std::size_t>(row_selection(ids, slot_stride, topk, n_blocks, out.data())));
}

// K and V rows of a list of key tokens of one (request, kv head), converted to float
// (row-major [n, d]) so that the G query heads of the group reuse them.
struct GatheredKv {
  std::vector<float> k, v;
  std::int64_t n = 0;

  void gather(const KvCache& kv, const KvRows& rows, std::int64_t b, std::int64_t kv_head,
              const std::vector<std::int64_t>& tokens, int d) {
    n = static_cast<std::int64_t>(tokens.size());
    k.resize(static_cast<std::size_t>(n * d));
    v.resize(static_cast<std::size_t>(n * d));
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t off = rows.offset(b, tokens[i], kv_head);
      load_row(kv.k.data, kv.k.dtype, off, d, k.data() + i * d);
      load_row(kv.v.data, kv.v.dtype, off, d, v.data() + i * d);
    }
  }
};

// Per-thread buffers of attend_fp64.
struct Fp64Scratch {
  std::vector<double> scores, acc;
};

// One (query, head) of FP64 softmax attention over all n gathered keys, with an optional sink
// (a virtual key of logit *sink and zero value). Writes out_row [d] and returns the natural-log
// LSE; no key and no sink gives out = 0, lse = -inf; only the sink gives out = 0, lse = sink.
inline float attend_fp64(const float* q_row, const GatheredKv& kv, int d, double scale,
                         const float* sink, Fp64Scratch& scratch, float* out_row) {
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  std::vector<double>& scores = scratch.scores;
  std::vector<double>& acc = scratch.acc;
  scores.resize(static_cast<std::size_t>(kv.n));
  double m = sink ? static_cast<double>(*sink) : kNegInf;
  for (std::int64_t i = 0; i < kv.n; ++i) {
    scores[i] = saturate_score(scale * dot_f64(q_row, kv.k.data() + i * d, d));
    m = std::max(m, scores[i]);
  }
  std::fill(out_row, out_row + d, 0.f);
  if (kv.n == 0) return sink ? *sink : -std::numeric_limits<float>::infinity();
  double z = sink ? std::exp(static_cast<double>(*sink) - m) : 0.0;
  acc.assign(static_cast<std::size_t>(d), 0.0);
  for (std::int64_t i = 0; i < kv.n; ++i) {
    const double p = std::exp(scores[i] - m);
    z += p;
    const float* v = kv.v.data() + i * d;
    for (int j = 0; j < d; ++j) acc[j] += p * v[j];
  }
  for (int j = 0; j < d; ++j) out_row[j] = static_cast<float>(acc[j] / z);
  return static_cast<float>(m + std::log(z));
}

}  // namespace msa::cpu
