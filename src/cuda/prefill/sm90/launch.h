// Host entry of the sm_90a KV-block-major sparse prefill kernel (BF16, D = 128).
#pragma once

#include "cuda/prefill/sm90/params.h"

typedef struct CUstream_st* cudaStream_t;

namespace msa::cuda {

// Launches grid_ctas persistent CTAs on `stream`; each loops over the work items of p.work up
// to *p.work_count (read on the device, so the host never synchronises). Writes o_partial and
// lse_partial for every (query, head) row of every item; other entries are left untouched.
// Launched with programmatic dependent launch allowed: it waits for the previous kernel's
// writes before reading anything, and lets the next kernel start early.
// Throws msa::Error for parameters the kernel does not support (page size, group, head dim,
// strides TMA cannot describe), before launching.
void launch_prefill_sm90(const PrefillParams& p, int grid_ctas, cudaStream_t stream);

// The TMA descriptors of q, o_partial, k and v (both sm_90a prefill kernels use them). Throws
// msa::Error naming the tensor when the driver rejects it (alignment, strides).
PrefillTma make_prefill_tma(const PrefillParams& p);

// Resident CTAs per SM, from the occupancy calculator (the kernel is persistent: grid_ctas =
// SMs * this saturates the GPU).
int prefill_sm90_ctas_per_sm();

}  // namespace msa::cuda
