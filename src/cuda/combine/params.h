// Runtime parameters of the combine kernel (spec §3). Strides in elements.
#pragma once

#include <cstdint>

namespace msa::cuda {

struct CombineParams {
  const void* o_partial;            // [topk, total_q, h_q, d] bf16
  const float* lse_partial;         // [topk, total_q, h_q]
  const std::int32_t* split_counts; // [total_q, h_kv]
  const float* sinks;               // [h_q] natural-log logits; may be null
  void* out;                        // [total_q, h_q, d] bf16 | fp16 (see out_fp16)
  std::int64_t stride_out_token;
  std::int64_t stride_out_head;
  float* lse;                       // [total_q, h_q] (row stride h_q); may be null
  std::int64_t total_q;
  int h_q;
  int group;
  int d;
  bool out_fp16;
};

}  // namespace msa::cuda
