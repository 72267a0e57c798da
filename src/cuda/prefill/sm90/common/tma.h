// The TMA descriptors of both sm_90a prefill kernels (host side).
#pragma once

#include <string>

#include "cuda/prefill/sm90/common/params.h"
#include "msa/tensor.h"

namespace msa::cuda::prefill_sm90 {

// Descriptors of q, o_partial, k and v for elements of `dtype` (bf16 | fp16) and head dim
// `head_dim`. Throws msa::Error naming the tensor when the driver rejects it (alignment, strides).
PrefillTma make_prefill_tma(const AttentionParams& p, DType dtype, int head_dim);
// The same with K/V of `kv_dtype`: dtype, or fp8_e4m3 with bf16 q (the decode's FP8 caches).
PrefillTma make_prefill_tma(const AttentionParams& p, DType dtype, DType kv_dtype, int head_dim);

// Sets t.q_wide and t.q_wide_by_consumers: at group 1 the consumer warpgroups gather Q, q_wide a
// box a column half of 64 rows (a warpgroup's); otherwise the builders do, q_wide a box a column
// half of a whole tile's rows (q_per_tile queries' heads). Built only for the kernel that reads
// it (one descriptor encode on the host).
void add_wide_q_boxes(PrefillTma& t, const AttentionParams& a, DType dtype, int head_dim, int q_per_tile);

// The descriptor of one paged (or flat) K or V tensor at `base` with a's geometry: (d, token in
// page, kv head, page), box (one 128-byte row, kv_box_rows(a), 1, 1). The indexer's one-head
// index-K cache uses it too. `what` names the tensor in the msa::Error.
CUtensorMap make_kv_tensor_map(const AttentionParams& a, const void* base, DType kv_dtype, int head_dim,
                               const std::string& what);
// Token rows per K/V box: the page size, or 128 for flat K/V.
int kv_box_rows(const AttentionParams& a);

}  // namespace msa::cuda::prefill_sm90
