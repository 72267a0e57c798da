// Parameters of the top-k kernel (spec §5): one row per (head, query) of the indexer's
// scores. Strides are in elements; every pointer is device memory.
#pragma once

#include <cstdint>

namespace msa::cuda {

struct TopkParams {
  const float* scores = nullptr;  // [h, total_q, cols] fp32
  std::int64_t scores_stride_h = 0, scores_stride_q = 0, scores_stride_col = 0;
  const std::int32_t* cu_seqlens_q = nullptr;  // [batch + 1], read on the device
  std::int64_t cu_seqlens_q_stride = 1;
  const std::int32_t* k_len = nullptr;  // [batch], read on the device
  std::int64_t k_len_stride = 1;
  std::int32_t* topk = nullptr;  // [h, total_q, topk] int32 (written), any non-overlapping strides
  std::int64_t topk_stride_h = 0, topk_stride_q = 0, topk_stride_slot = 0;
  std::int64_t total_q = 0;  // rows per head
  int h = 0;                 // heads (scores.shape[0])
  int batch = 0;             // B >= 1 when total_q > 0
  int cols = 0;              // scores.shape[2]: candidates past it are never read
  int k = 0;                 // blocks per row, 1..32
  bool quantised = false;    // TopkRanking::kQuantised16 (else kExact)
};

}  // namespace msa::cuda
