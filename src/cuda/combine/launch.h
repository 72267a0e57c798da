// Host entry of the combine kernel (spec §3): ascending-slot LSE merge of bf16 partials.
#pragma once

#include "cuda/combine/params.h"

typedef struct CUstream_st* cudaStream_t;

namespace msa::cuda {

// Merges the partials of every (query, head) row into out (and lse when p.lse is set):
// n = split_counts[q, h / group] (clamped to 0..topk), m = max(lse_s, sink), Z = exp(sink - m)
// then + exp(lse_s - m) in ascending s; out = sum_s (exp(lse_s - m) / Z) o_s in
// FP32, ascending s; lse = m + ln Z. A non-finite m or Z (n = 0 without a sink, all partials
// -inf, a NaN) gives out = 0, lse = -inf; n = 0 with a sink gives out = 0, lse = sink.
// Bitwise reproducible. With `programmatic`, launched with programmatic stream serialisation:
// it may start while the previous kernel on the stream finishes and waits for it
// (griddepcontrol.wait) before reading anything. Throws msa::Error for unsupported d, topk
// or misaligned out.
void launch_combine(const CombineParams& p, cudaStream_t stream, bool programmatic = true);

}  // namespace msa::cuda
