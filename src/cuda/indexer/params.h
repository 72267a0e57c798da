// Runtime parameters of the sm_90a prefill indexer kernel (spec §5), host <-> device. Shapes in
// brackets; strides in elements. Every pointer is device memory.
#pragma once

#include <cstdint>

#include "cuda/prefill/sm90/common/params.h"

namespace msa::cuda {

// (query, head) rows of the kernel's tile: queries_per_tile = kIndexerTileRows / h_i, so h_i is
// at most this.
constexpr int kIndexerTileRows = 256;

struct IndexerParams {
  // The index-K cache seen as a one-head K in the prefill's K/V geometry (its K loader and page
  // checks read it): k, stride_kv_page / _head / _token, num_pages, kv_rows, page_size,
  // page_table, stride_page_table, page_table_cols, cu_seqlens_k ([B + 1], flat only), h_kv = 1.
  // Its q, v, batch and output fields are unused (null).
  prefill_sm90::AttentionParams cache;

  const void* index_q;  // [total_q, h_i, d] bf16 | fp16 | fp8_e4m3 (the kernel instance's dtype)
  std::int64_t stride_q_token, stride_q_head;

  const std::int32_t* cu_seqlens_q;  // [B + 1], read on the device
  std::int64_t stride_cu_seqlens_q;
  const std::int32_t* k_len;  // [B], read on the device
  std::int64_t stride_k_len;

  float* scores;  // [h_i, total_q, cols] fp32: every element written (-inf: no visible token);
                  // null in the fused indexer + top-k
  std::int64_t stride_scores_head, stride_scores_token, stride_scores_col;

  // The fused indexer + top-k (the kernel instance's kList > 0) writes no score: its output is
  // each row's k block ids as TopK would pick them from the scores (exact ranking).
  std::int32_t* topk;  // [h_i, total_q, k] int32, any non-overlapping strides
  std::int64_t stride_topk_head, stride_topk_token, stride_topk_slot;
  std::uint64_t* partial;  // [h_i * total_q, chunks, kList] TopK keys (chunks > 1 only): each
                           // unit's best candidates of a row, merged by merge.cu
  int k;                   // 1..kList + 1

  std::int64_t total_q;
  int batch;             // B >= 1
  int h_i;               // index heads, 1..256
  int cols;              // scores.shape[2] >= 1 (fused: ceil(max_k_len / 128), the ranked columns)
  int queries_per_tile;  // kIndexerTileRows / h_i: a tile is that many queries of one request, all heads
  int chunk_cols;        // score columns per work unit
  int chunks;            // ceil(cols / chunk_cols): work units per tile
  float scale;           // applied to the best dot product
};

// The TMA descriptor of the index-K cache (prefill_sm90::make_kv_tensor_map of `cache`).
struct IndexerTma {
  CUtensorMap k;
  int box_rows;  // tokens per box: page_size, or 128 for flat
};

}  // namespace msa::cuda
