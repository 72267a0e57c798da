// Host entry of the combine kernel (spec §3): ascending-slot LSE merge of 16-bit partials, one
// instance per (partial dtype, head dim) of the instantiation list (src/cuda/instantiations/).
#pragma once

#include <climits>
#include <cstdint>

#include "cuda/combine/params.h"
#include "msa/tensor.h"

typedef struct CUstream_st* cudaStream_t;

namespace msa::cuda {

// Merges the partials of every (query, head) row into out (and lse when p.lse is set):
// n = split_counts[q, h / group] (clamped to 0..topk), m = max(lse_s, sink), Z = exp(sink - m)
// then + exp(lse_s - m) in ascending s; out = sum_s (exp(lse_s - m) / Z) o_s in FP32,
// ascending s; lse = m + ln Z. A non-finite m or Z (n = 0 without a sink, all partials -inf, a
// NaN) gives out = 0, lse = -inf; n = 0 with a sink gives out = 0, lse = sink. With
// p.tile_list only the listed pairs' rows are merged (the others are not touched). Bitwise
// reproducible. With `programmatic`, launched with programmatic stream serialisation: it may
// start while the previous kernel on the stream finishes and waits for it before reading
// anything. sm_count is the current device's SM count (the operator's cached one): with
// p.tile_list and p.pair_ctas 0 the launch spreads the listed pairs' rows over about 32 CTAs
// per SM; elsewhere it is not read (0 will do). The operator layer has validated p (alignment,
// strides, topk); this only asserts.
template <DType kDtype, int kHeadDim>
void launch_combine(const CombineParams& p, int sm_count, cudaStream_t stream, bool programmatic);

// Whether p meets launch_combine's preconditions (which it asserts): counts in range, 16-byte
// aligned partials and out, out strides of whole 16-byte rows, a consistent tile list.
inline bool combine_params_ok(const CombineParams& p) {
  const auto aligned16 = [](const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0; };
  return p.topk >= 1 && p.topk <= 32 && p.uniform_count >= 1 && p.uniform_count <= p.topk && p.group >= 1 &&
         p.h_q >= 1 && p.h_q % p.group == 0 && p.total_q >= 0 && aligned16(p.o_partial) && aligned16(p.out) &&
         p.stride_out_token % 8 == 0 && p.stride_out_head % 8 == 0 &&
         (p.tile_list == nullptr ||
          (p.tile_count != nullptr && p.pair_ctas >= 0 && p.q_per_tile >= 1 && p.q_per_tile <= 32 &&
           p.tiles_per_head == (p.total_q + p.q_per_tile - 1) / p.q_per_tile &&
           std::int64_t(p.h_q / p.group) * p.tiles_per_head <= INT32_MAX / 2));
}

// Whether the bulk kernel (CombineKernel::kBulk) can merge p at head dim d: every row at once,
// or listed pairs whose group is whole units of kCombineBulkThreads / (d / 8) rows (d = 128:
// G = 8 or 16).
inline bool combine_bulk_applies(const CombineParams& p, int d) {
  const int unit_rows = kCombineBulkThreads / (d / 8);
  return p.tile_list == nullptr || p.group % unit_rows == 0;
}

// CombineParams' stride of out's dimension `dim` (0: token, 1: head): 0 where the dimension has
// at most one index, whose stride the layout rules leave free (check_layout) and the combine
// only multiplies by 0 (or never uses); the tensor's own stride, a multiple of 8 elements,
// elsewhere.
inline std::int64_t combine_out_stride(const TensorView& out, int dim) {
  return out.dim(dim) <= 1 ? 0 : out.stride[dim];
}

}  // namespace msa::cuda
