// Runtime parameters of the combine kernel (spec §3). Strides in elements.
#pragma once

#include <cstdint>

namespace msa::cuda {

enum class CombineKernel : int { kAuto = 0, kLoads = 1, kBulk = 2 };
inline constexpr int kCombineBulkThreads = 128;             // a bulk CTA's threads (16 bytes of a row each)
inline constexpr std::int64_t kCombineBulkMinRows = 65536;  // CombineKernel::kAuto: bulk from here

struct CombineParams {
  const void* o_partial;             // [topk, total_q, h_q, d] in the instance's dtype (bf16 |
                                     // fp16), contiguous, 16-byte aligned
  const float* lse_partial;          // [topk, total_q, h_q] contiguous; natural log, -inf = empty
  const std::int32_t* split_counts;  // [total_q, h_kv] contiguous: slots 0..n-1 of a row are valid;
                                     // null: every row has slots 0..uniform_count-1
  const float* sinks;                // [h_q] natural-log sink logits; may be null
  void* out;                         // [total_q, h_q, d] bf16 | fp16 (see out_fp16), last dim
                                     // contiguous, 16-byte aligned rows
  std::int64_t stride_out_token;     // multiple of 8 (0 for one token: combine_out_stride)
  std::int64_t stride_out_head;      // multiple of 8 (0 for one head)
  float* lse;                        // [total_q, h_q] (row stride h_q); may be null
  std::int64_t total_q;
  int h_q;
  int group;      // h_q / h_kv
  int topk;       // slots of o_partial, 1..32
  int uniform_count;  // 1..topk, the slots of every row when split_counts is null
  // The prefill's routing (null tile_list: every row is merged). Only the rows of the listed
  // (KV head, query tile) pairs are merged, the first *tile_count of tile_list (pairs numbered
  // head-major: KV head * tiles_per_head + q / q_per_tile); the tile-union kernel wrote the
  // others. The launch then takes pair_ctas CTAs per pair (not one per kRowsPerCta rows), and
  // those past the count leave at once, so that rows it leaves alone cost little.
  const std::int32_t* tile_list;   // [h_kv * tiles_per_head]
  const std::int32_t* tile_count;  // [1], clamped to [0, h_kv * tiles_per_head]
  int q_per_tile;                  // 1..32
  std::int64_t tiles_per_head;     // ceil(total_q / q_per_tile)
  // CTAs per listed pair, each merging every pair_ctas-th round of kRowsPerCta of the pair's
  // rows; 0: launch_combine picks (enough CTAs to fill the GPU when pairs are few, 1 when they
  // are many). The result does not depend on it.
  int pair_ctas;
  bool out_fp16;  // out is fp16 (else bf16)
  // Which kernel merges (the result is the same, bit for bit): the launch's pick (the bulk one
  // from kCombineBulkMinRows rows where it applies), the kernel that loads each row's slots
  // into registers, or the one that copies a unit's rows of each slot into shared memory with
  // bulk copies (where combine_bulk_applies; else the loads kernel).
  CombineKernel kernel;
};

}  // namespace msa::cuda
