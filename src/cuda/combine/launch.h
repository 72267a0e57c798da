// Host entry of the combine kernel (spec §3): ascending-slot LSE merge of 16-bit partials, one
// instance per (partial dtype, head dim) of the instantiation list (src/cuda/instantiations/).
#pragma once

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
// anything. The operator layer has validated p (alignment, strides, topk); this only asserts.
template <DType kDtype, int kHeadDim>
void launch_combine(const CombineParams& p, cudaStream_t stream, bool programmatic);

}  // namespace msa::cuda
