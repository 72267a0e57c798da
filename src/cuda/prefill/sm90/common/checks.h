// What both sm_90a prefill launchers assert of AttentionParams (the operator layers,
// src/cuda/api/prefill.cpp and decode.cpp, validated it: check_cuda_prefill, check_cuda_decode).
#pragma once

#include <climits>
#include <cstdint>

#include "core/check.h"
#include "cuda/prefill/sm90/common/params.h"

namespace msa::cuda::prefill_sm90 {

inline void assert_supported(const AttentionParams& a) {
  const bool paged = a.page_table != nullptr;
  MSA_ASSERT(paged ? (a.page_size == 16 || a.page_size == 32 || a.page_size == 64 || a.page_size == 128)
                   : (a.cu_seqlens_k != nullptr && a.kv_rows >= 1));
  MSA_ASSERT(a.group >= 1 && a.group <= 16 && a.h_q == a.group * a.h_kv);
  MSA_ASSERT(a.topk >= 1 && a.topk <= 32 && a.slots >= 1 && a.slots <= 32);
  // TMA coordinates are signed 32-bit: the rows of o_partial and of K/V must fit.
  MSA_ASSERT(a.total_q >= 1 && std::int64_t(a.slots) * a.total_q <= INT32_MAX);
  MSA_ASSERT((paged ? a.num_pages : a.kv_rows) <= INT32_MAX);
}

}  // namespace msa::cuda::prefill_sm90
