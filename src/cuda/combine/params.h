// Runtime parameters of the combine kernel (spec §3). Strides in elements.
#pragma once

#include <cstdint>

namespace msa::cuda {

struct CombineParams {
  const void* o_partial;             // [topk, total_q, h_q, d] in the instance's dtype (bf16 |
                                     // fp16), contiguous, 16-byte aligned
  const float* lse_partial;          // [topk, total_q, h_q] contiguous; natural log, -inf = empty
  const std::int32_t* split_counts;  // [total_q, h_kv] contiguous: slots 0..n-1 of a row are valid;
                                     // null: every row has slots 0..uniform_count-1
  const float* sinks;                // [h_q] natural-log sink logits; may be null
  void* out;                         // [total_q, h_q, d] bf16 | fp16 (see out_fp16), last dim
                                     // contiguous, 16-byte aligned rows
  std::int64_t stride_out_token;     // multiple of 8
  std::int64_t stride_out_head;      // multiple of 8
  float* lse;                        // [total_q, h_q] (row stride h_q); may be null
  std::int64_t total_q;
  int h_q;
  int group;      // h_q / h_kv
  int topk;       // slots of o_partial, 1..32
  int uniform_count;  // 1..topk, the slots of every row when split_counts is null
  // The prefill's routing (may be null): rows of tiles flagged here were written by the
  // tile-union kernel and are left alone. [h_kv, tiles_per_head], tile = q / q_per_tile.
  const std::uint8_t* union_tile;
  int q_per_tile;
  std::int64_t tiles_per_head;
  bool out_fp16;  // out is fp16 (else bf16)
};

}  // namespace msa::cuda
