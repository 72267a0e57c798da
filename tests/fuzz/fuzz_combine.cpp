// The Combine operator under fuzzing (Op kOpCombine), with an FP64 oracle of its own.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "tests/fuzz/fuzz_build.h"
#include "tests/fuzz/fuzz_ops.h"

namespace msa_fuzz {

// o_partial [topk, rows, h_q, d] (fp32 | bf16), lse_partial, split_counts, sinks. NaN planted in
// slots beyond a row's count and in slots with lse -inf must not leak. Variant bit 3: moved-from.
void op_combine(Ctx& c) {
  decode_common(c);
  const std::int64_t rows = c.h.aux % 9;
  c.read_mutations();
  c.apply_shape_mutations(true);
  c.apply_option_mutations();
  const std::int64_t h_kv = std::max(c.shape.h_kv, 0), h_q = std::max(c.shape.h_q, 0);
  const std::int64_t K = std::max(c.shape.topk, 0), d = std::max(c.shape.d, 0);
  const DType pdt = (c.h.dtype & 2) ? DType::kBF16 : DType::kFP32;
  TSpec& op_ = c.T[kOPartial].spec;
  set_shape(op_, pdt, {K, rows, h_q, d}, (c.h.layout & 8) ? 8 : 0);
  op_.fill = Fill::kFloat;
  op_.vmode = c.h.values % 5;
  TSpec& lp = c.T[kLsePartial].spec;
  set_shape(lp, DType::kFP32, {K, rows, h_q});
  std::vector<std::int32_t> lbits(static_cast<std::size_t>(K * rows * h_q));
  for (auto& b : lbits) {
    float f = c.rng.sym(5.f);
    if (c.rng.below(6) == 0) f = -kInf;
    if (c.h.values % 5 == 1) f = c.rng.sym(1e30f);
    std::memcpy(&b, &f, 4);
  }
  set_ints(lp, std::move(lbits), 0);
  lp.dtype = DType::kInt32;
  TSpec& sc = c.T[kSplitCounts].spec;
  set_shape(sc, DType::kInt32, {rows, h_kv});
  std::vector<std::int32_t> counts(static_cast<std::size_t>(rows * h_kv));
  for (auto& n : counts) n = static_cast<std::int32_t>(c.rng.below(K + 1));
  set_ints(sc, counts, 0);
  TSpec& out = c.T[kOut].spec;
  set_shape(out, c.dt, {rows, h_q, d}, (c.h.layout & 16) ? 8 : 0);
  out.fill = Fill::kOutput;
  if (!(c.h.outputs & 1)) {
    set_shape(c.T[kLse].spec, DType::kFP32, {rows, h_q}, (c.h.layout & 32) ? 1 : 0);
    c.T[kLse].spec.fill = Fill::kOutput;
  }
  build_sinks(c, h_q);
  c.apply_tensor_mutations();
  if (!c.materialize_all()) return;
  retype_float_bits(c, kSinks);
  retype_float_bits(c, kLsePartial);
  c.apply_element_writes();
  c.apply_shape_mutations(false);
  const std::int64_t group = h_kv > 0 ? h_q / h_kv : 1;
  // Unseen partials: NaN in slots >= count and in slots whose lse is -inf.
  if ((c.h.plant % 4) != 0 && !c.hostile) {
    const TensorView& o = c.T[kOPartial].view;
    const TensorView& l = c.T[kLsePartial].view;
    for (std::int64_t s = 0; s < K; ++s)
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t h = 0; h < h_q; ++h) {
          const bool beyond = s >= counts[r * h_kv + h / group];
          const bool dead = rd<float>(l.data, s * l.stride[0] + r * l.stride[1] + h * l.stride[2]) == -kInf;
          if (beyond || dead) store_f(o.data, o.dtype, s * o.stride[0] + r * o.stride[1] + h * o.stride[2] + c.rng.below(d), kNaN);
        }
  }
  msa::CombineArgs a;
  a.o_partial = c.T[kOPartial].view;
  a.lse_partial = c.T[kLsePartial].view;
  a.split_counts = c.T[kSplitCounts].view;
  a.out = c.T[kOut].view;
  a.lse = c.T[kLse].view;
  a.sinks = c.T[kSinks].view;
  std::vector<msa::Combine> keep;
  keep.reserve(2);
  if (call("Combine(shape, options)", [&] { keep.emplace_back(c.shape, c.opt); }) != Outcome::kOk) return;
  msa::Combine* op = &keep.back();
  call("Combine::plan", [&] { op->plan(rows - (c.h.variant & 4 ? 5 : 0)); });
  if (c.h.variant & 8) {
    msa::Combine moved(std::move(*op));
    moved_from_call("moved-from Combine::run", [&] { op->run(a); });
    keep.emplace_back(std::move(moved));
    op = &keep.back();
  }
  if (call_checked(c, "Combine::run", {kOut, kLse}, [&] { op->run(a); }) != Outcome::kOk) return;
  c.expect_layout_ok({kOPartial, kLsePartial, kSplitCounts, kOut, kLse, kSinks}, "Combine::run");
  if (c.finite_inputs()) {
    c.expect_no_nan(kOut, "Combine::run");
    c.expect_no_nan(kLse, "Combine::run");
  }
  if (!c.ordinary() || !injective(a.out) || (a.lse.rank > 0 && !injective(a.lse))) return;
  // FP64 oracle of spec §3 (+ the sink term of §6).
  const TensorView& o = a.o_partial;
  const TensorView& l = a.lse_partial;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t h = 0; h < h_q; ++h) {
      const std::int64_t n = counts[r * h_kv + h / group];
      const bool has_sink = a.sinks.rank > 0;
      const double sink = has_sink ? rd<float>(a.sinks.data, h * a.sinks.stride[0]) : 0.0;
      double m = has_sink ? sink : -std::numeric_limits<double>::infinity();
      for (std::int64_t s = 0; s < n; ++s) m = std::max<double>(m, rd<float>(l.data, s * l.stride[0] + r * l.stride[1] + h * l.stride[2]));
      double z = has_sink ? std::exp(sink - m) : 0.0;
      std::vector<double> w(static_cast<std::size_t>(n));
      for (std::int64_t s = 0; s < n; ++s) {
        w[s] = std::exp(rd<float>(l.data, s * l.stride[0] + r * l.stride[1] + h * l.stride[2]) - m);
        z += w[s];
      }
      const bool empty = !(z > 0) || !std::isfinite(z) || std::isinf(m);
      const double lse = empty ? -std::numeric_limits<double>::infinity() : m + std::log(z);
      if (a.lse.rank > 0) {
        const float got = rd<float>(a.lse.data, r * a.lse.stride[0] + h * a.lse.stride[1]);
        const bool ok = std::isinf(lse) ? got == -kInf : std::fabs(got - lse) <= 1e-3;
        if (!ok) fail("d", "Combine::run: lse[" + std::to_string(r) + ", " + std::to_string(h) + "] = " + std::to_string(got) + ", oracle " + std::to_string(lse));
      }
      for (std::int64_t j = 0; j < d; ++j) {
        double want = 0;
        if (!empty)
          for (std::int64_t s = 0; s < n; ++s)
            if (w[s] != 0) want += w[s] / z * load_f(o.data, o.dtype, s * o.stride[0] + r * o.stride[1] + h * o.stride[2] + j);
        const float got = load_f(a.out.data, a.out.dtype, r * a.out.stride[0] + h * a.out.stride[1] + j);
        if (!(std::fabs(got - want) <= 1e-2 + 1e-2 * std::fabs(want)))
          fail("d", "Combine::run: out[" + std::to_string(r) + ", " + std::to_string(h) + ", " + std::to_string(j) + "] = " +
                        std::to_string(got) + ", oracle " + std::to_string(want));
      }
    }
  }
}
}  // namespace msa_fuzz
