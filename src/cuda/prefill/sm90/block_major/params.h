// Runtime parameters of the KV-block-major sparse prefill kernel (sm_90a): the attention
// problem and the k2q plan it walks (spec §2; core/plan_encoding.h for the words).
#pragma once

#include <cstdint>

#include "cuda/prefill/sm90/common/params.h"
#include "msa/plan.h"

namespace msa::cuda::prefill_sm90 {

struct BlockMajorParams {
  AttentionParams attn;
  const WorkItem* work;            // [work_capacity]; the first *work_count are meaningful
  const std::int32_t* work_count;  // [1]
  const std::int32_t* qsplit;      // [h_kv, edges_per_head] qsplit words (q_local, slot)
  std::int64_t edges_per_head;     // total_q * topk
  bool kv_once;                    // K/V boxes with EVICT_FIRST (block_major_kv_once), else EVICT_LAST
};

}  // namespace msa::cuda::prefill_sm90
