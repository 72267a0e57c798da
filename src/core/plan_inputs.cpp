#include "core/plan_inputs.h"

#include <initializer_list>

#include "core/check.h"

namespace msa {

namespace {

// "[i]" or "[i, j, s]" (appended piecewise: GCC 12 warns falsely on "[" + string&&).
std::string index_string(std::initializer_list<std::int64_t> idx) {
  std::string s = "[";
  for (const std::int64_t i : idx) {
    if (s.size() > 1) s += ", ";
    s += std::to_string(i);
  }
  s += ']';
  return s;
}

// Calls f(index, element offset) for every element of a rank-1 or rank-3 view; the index string
// is made only when f asks for it (on a mismatch).
template <class F>
void for_each_index(const TensorView& t, F&& f) {
  if (t.rank == 1) {
    for (std::int64_t i = 0; i < t.dim(0); ++i) f([=] { return index_string({i}); }, i * t.stride[0]);
    return;
  }
  for (std::int64_t i = 0; i < t.dim(0); ++i)
    for (std::int64_t j = 0; j < t.dim(1); ++j)
      for (std::int64_t s = 0; s < t.dim(2); ++s) f([=] { return index_string({i, j, s}); }, t.offset(i, j, s));
}

std::string pointer(const void* p) { return std::to_string(reinterpret_cast<std::uintptr_t>(p)); }

}  // namespace

PlanInputs::Kept PlanInputs::keep_one(const TensorView& t) {
  Kept k;
  k.view = t;
  if (t.device == Device::kCpu) {
    k.values.reserve(static_cast<std::size_t>(t.numel()));
    for_each_index(t, [&](auto, std::int64_t off) { k.values.push_back(t.ptr<const std::int32_t>()[off]); });
  }
  return k;
}

void PlanInputs::keep(const VarlenBatch& batch, const TensorView& topk) {
  cu_seqlens_q_ = keep_one(batch.cu_seqlens_q);
  k_len_ = keep_one(batch.k_len);
  topk_ = keep_one(topk);
}

void PlanInputs::expect_one(const Kept& kept, const TensorView& t, const std::string& name) {
  const TensorView& p = kept.view;
  const std::string again = ": plan() again after changing the batch or the selection";
  MSA_REQUIRE(t.device == p.device, name + ".device", to_string(t.device),
              "differs from the tensor given to plan() (" + to_string(p.device) + ")" + again);
  for (int i = 0; i < p.rank; ++i) check_dim(t, name, i, p.dim(i));
  if (p.device != Device::kCpu) {
    // Device contents are read by the kernels: the same memory is the only promise checkable here.
    MSA_REQUIRE(t.data == p.data, name + ".data", pointer(t.data),
                "is not the tensor given to plan() (" + pointer(p.data) + ")" + again);
    for (int i = 0; i < p.rank; ++i)
      MSA_REQUIRE(t.stride[i] == p.stride[i], name + ".stride[" + std::to_string(i) + "]", std::to_string(t.stride[i]),
                  "differs from the tensor given to plan() (" + std::to_string(p.stride[i]) + ")" + again);
    return;
  }
  std::size_t n = 0;
  for_each_index(t, [&](auto index, std::int64_t off) {
    const std::int32_t v = t.ptr<const std::int32_t>()[off];
    const std::int32_t planned = kept.values[n++];
    MSA_REQUIRE(v == planned, name + index(), std::to_string(v),
                "differs from the planned value " + std::to_string(planned) + again);
  });
}

void PlanInputs::expect_same(const VarlenBatch& batch, const TensorView& topk) const {
  expect_one(cu_seqlens_q_, batch.cu_seqlens_q, "cu_seqlens_q");
  expect_one(k_len_, batch.k_len, "k_len");
  expect_one(topk_, topk, "topk");
}

}  // namespace msa
