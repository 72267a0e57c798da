// Runtime parameters shared by the two sm_90a sparse prefill kernels, host <-> device: the
// attention problem (queries, K/V, batch, outputs) and the TMA descriptors built from it.
// Shapes in brackets; strides in elements; "may be null" says when a pointer is optional.
// Each kernel's own parameters (its schedule) wrap AttentionParams: block_major/params.h,
// tile_union/params.h.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace msa::cuda::prefill_sm90 {

struct AttentionParams {
  // Queries, 16-bit (the instance's dtype).
  const void* q;  // [total_q, h_q, d]
  std::int64_t stride_q_token;
  std::int64_t stride_q_head;

  // Paged K/V: [num_pages, h_kv, page_size, d] (last dim contiguous), the instance's dtype (FP8
  // E4M3 for the decode's FP8 caches, with bf16 q). Flat K/V is the special
  // case page_table == nullptr: token t of request b is row cu_seqlens_k[b] + t, with
  // stride_kv_token between rows and stride_kv_page unused.
  const void* k;
  const void* v;
  std::int64_t stride_kv_page;  // k and v share strides (validated)
  std::int64_t stride_kv_head;
  std::int64_t stride_kv_token;
  std::int64_t num_pages;
  std::int64_t kv_rows;              // flat: rows of k and v (k.shape[0]); paged: unused
  int page_size;                     // 16, 32, 64 or 128; 0 for flat
  const std::int32_t* page_table;    // [B, page_table_cols]; null for flat
  std::int64_t stride_page_table;    // row stride of page_table
  std::int64_t page_table_cols;      // pages past it, like ids outside [0, num_pages), read as
                                     // zeros and their tokens are invisible
  const std::int32_t* cu_seqlens_k;  // [B + 1]; flat only, else null
  // FP8 K/V only (else null): K = k_descale[kv_head * k_descale_stride] * stored, V likewise;
  // [1] (stride 0) or [h_kv] (stride 1) fp32, finite and > 0 (validated).
  const float* k_descale;
  const float* v_descale;
  int k_descale_stride;
  int v_descale_stride;

  // Batch.
  const std::int32_t* cu_seqlens_q;  // [B + 1]
  const std::int32_t* k_len;         // [B]

  // Outputs: partials in the instance's dtype, normalised; LSE natural log, -inf = no visible key.
  void* o_partial;     // [slots, total_q, h_q, d]
  float* lse_partial;  // [slots, total_q, h_q]
  int slots;           // partial slots: topk for the prefill, the split count for the decode
  // Final outputs, for rows a kernel completes alone (TileUnionParams::direct): out [total_q,
  // h_q, d] in the instance's dtype (16-byte aligned rows; written through PrefillTma::out),
  // normalised with the sink; lse [total_q, h_q] contiguous, may be null; sinks [h_q]
  // natural-log logits, may be null (a non-finite sink is ignored). Null out: partials only.
  void* out;
  std::int64_t stride_out_token;
  std::int64_t stride_out_head;
  float* lse;
  const float* sinks;

  std::int64_t total_q;
  int h_q;
  int h_kv;
  int group;         // h_q / h_kv, 1..16
  int topk;          // 1..32
  float scale_log2;  // softmax scale * log2(e)
};

// TMA descriptors built on the host from AttentionParams (make_prefill_tma), all with a 128-byte
// swizzle and boxes one 128-byte row wide (64 16-bit columns; K/V in FP8: 128 columns). q and o_partial are seen as (d, head, row) with a
// box of (64, q_box_rows, 1): one box is q_box_rows consecutive heads of one query. K and V are
// (d, token in page, kv head, page) with a box of (64, kv_box_rows, 1, 1); flat K/V is one page
// of all rows.
struct PrefillTma {
  CUtensorMap q;          // q as [total_q][h_q][d]
  CUtensorMap o_partial;  // o_partial as [slots * total_q][h_q][d]
  CUtensorMap out;        // out as [total_q][h_q][d] (its own strides); set when out is given
  CUtensorMap k;
  CUtensorMap v;
  CUtensorMap q_wide;       // q as q in the wide tile-union instance's boxes (add_wide_q_boxes): 64
                            // rows (64 / group queries' heads) where q_wide_by_consumers, else a
                            // whole tile's rows (q_per_tile queries' heads)
  int q_box_rows;           // group when it divides 64, else 1
  int kv_box_rows;          // page_size (16..128), or 128 for flat K/V
  int q_wide_by_consumers;  // 1: the wide instance's consumer warpgroups gather Q (group 1), 0:
                            // its builders (add_wide_q_boxes decides; 0 for every other kernel)
};

}  // namespace msa::cuda::prefill_sm90
