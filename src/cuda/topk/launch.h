// Host entry of the top-k kernel (spec §5, the CPU twin cpu::topk_select).
#pragma once

#include "cuda/topk/params.h"

typedef struct CUstream_st* cudaStream_t;

namespace msa::cuda {

// Writes every row's k block ids: a row of query position pos (bottom-right causal, from the
// device batch) has local block n - 1 = pos / 128; n <= k gives 0..n-1 then -1, otherwise the
// k - 1 best of blocks [0, n - 1) by the ranking's key descending (exact: score, NaN below every
// number, -0 equal to +0; quantised: MSA's 16-bit level; ties to the smaller id), then n - 1. Batch values are not checked here: a row whose request
// data are inconsistent reads at most its first `cols` scores and writes its k slots, nothing
// else. Graph-capturable (one launch, no allocation), bitwise reproducible. The operator layer
// has validated shapes and dtypes.
void launch_topk(const TopkParams& p, cudaStream_t stream);

}  // namespace msa::cuda
