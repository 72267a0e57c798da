// The TMA descriptors of both sm_90a prefill kernels (host side).
#pragma once

#include "cuda/prefill/sm90/common/params.h"
#include "msa/tensor.h"

namespace msa::cuda::prefill_sm90 {

// Descriptors of q, o_partial, k and v for elements of `dtype` (bf16 | fp16) and head dim
// `head_dim`. Throws msa::Error naming the tensor when the driver rejects it (alignment, strides).
PrefillTma make_prefill_tma(const AttentionParams& p, DType dtype, int head_dim);
// The same with K/V of `kv_dtype`: dtype, or fp8_e4m3 with bf16 q (the decode's FP8 caches).
PrefillTma make_prefill_tma(const AttentionParams& p, DType dtype, DType kv_dtype, int head_dim);

}  // namespace msa::cuda::prefill_sm90
