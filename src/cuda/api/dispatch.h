// The one runtime-to-template dispatch of each CUDA operator: (dtype, head dim) -> the kernel
// instance built for it, from the generated instance list (cmake/cuda_instances.cmake). A pair
// this build does not hold is an msa::Error naming the argument, never a fallback.
#pragma once

#include <string>

#include "core/check.h"
#include "cuda/instances.h"
#include "msa/tensor.h"

namespace msa::cuda {

// Whether some prefill instance has head dim d (plan() checks it before any dtype is known).
constexpr bool prefill_head_dim_built(int d) {
#define MSA_DISPATCH_CASE(DT, D) || d == (D)
  return false MSA_PREFILL_INSTANCES(MSA_DISPATCH_CASE);
#undef MSA_DISPATCH_CASE
}

// Calls f.template operator()<kDtype, kHeadDim>() for the prefill instance (dtype, d).
template <class F>
void dispatch_prefill(DType dtype, int d, F&& f) {
#define MSA_DISPATCH_CASE(DT, D) \
  if (dtype == DType::DT && d == (D)) return f.template operator()<DType::DT, (D)>();
  MSA_PREFILL_INSTANCES(MSA_DISPATCH_CASE)
#undef MSA_DISPATCH_CASE
  throw Error("q.dtype, shape.d", to_string(dtype) + ", " + std::to_string(d),
              "no CUDA sparse prefill instance: this build holds head dim 128 in " MSA_BUILT_DTYPES
              " (MSA_CUDA_DTYPES)");
}

// The decode's kernel instance for (q dtype, K/V dtype, d): the prefill's for 16-bit K/V, or
// the FP8 E4M3 tile-union instance (bf16 q); calls f.template operator()<kKvDtype, kHeadDim>()
// where kKvDtype is the tile-union instance (kFP8E4M3 or q's dtype).
template <class F>
void dispatch_decode(DType q_dtype, DType kv_dtype, int d, F&& f) {
  if (kv_dtype != DType::kFP8E4M3) return dispatch_prefill(q_dtype, d, f);
#define MSA_DISPATCH_CASE(DT, D) \
  if (d == (D)) return f.template operator()<DType::DT, (D)>();
  MSA_DECODE_FP8_INSTANCES(MSA_DISPATCH_CASE)
#undef MSA_DISPATCH_CASE
  throw Error("k.dtype, shape.d", "fp8_e4m3, " + std::to_string(d),
              "no CUDA FP8 decode instance: this build holds it for head dim 128 when bf16 is in MSA_CUDA_DTYPES (" MSA_BUILT_DTYPES
              ")");
}

// The same for the combine's instances (partial dtype, d).
template <class F>
void dispatch_combine(DType dtype, int d, F&& f) {
#define MSA_DISPATCH_CASE(DT, D) \
  if (dtype == DType::DT && d == (D)) return f.template operator()<DType::DT, (D)>();
  MSA_COMBINE_INSTANCES(MSA_DISPATCH_CASE)
#undef MSA_DISPATCH_CASE
  throw Error("o_partial.dtype, shape.d", to_string(dtype) + ", " + std::to_string(d),
              "no CUDA combine instance: this build holds head dims 64, 128, 256 in " MSA_BUILT_DTYPES
              " (MSA_CUDA_DTYPES)");
}

// The indexer's instance for its index dtype: calls f.template operator()<kDtype>().
template <class F>
void dispatch_indexer(DType dtype, F&& f) {
#define MSA_DISPATCH_CASE(DT) \
  if (dtype == DType::DT) return f.template operator()<DType::DT>();
  MSA_INDEXER_INSTANCES(MSA_DISPATCH_CASE)
#undef MSA_DISPATCH_CASE
  throw Error("index_q.dtype", to_string(dtype),
              "no CUDA indexer instance: this build holds fp8_e4m3 and " MSA_BUILT_DTYPES " (MSA_CUDA_DTYPES)");
}

}  // namespace msa::cuda
